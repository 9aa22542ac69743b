/* kernels/dispatch: picks a kernel table from CPU features, once. A table is handed out
 * only when this build compiled it in (the ISA file returns non-NULL) and the running CPU
 * has the instructions; $HACHI_ISA=ref|avx2|avx512|neon forces one when available.
 * AVX-512 is opt-in ($HACHI_ISA=avx512): its kernels have not yet run on a CPU that has
 * AVX-512 (the project's machines have none), so the automatic choice on such CPUs is the
 * tested AVX2 table. The kernel test still checks the AVX-512 table wherever it can run. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const char *const isa_names[HACHI_ISA_COUNT] = {"ref", "avx2", "avx512", "neon"};

const char *hachi_isa_name(hachi_isa isa) {
    return (unsigned)isa < HACHI_ISA_COUNT ? isa_names[isa] : "unknown";
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c") */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static int cpu_has(hachi_isa isa) {
    switch (isa) {
    case HACHI_ISA_REF: return 1;
#if defined(__x86_64__) || defined(__i386__)
    case HACHI_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case HACHI_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && has_f16c();
#endif
#if defined(__aarch64__)
    case HACHI_ISA_NEON: return 1;   /* ASIMD is baseline; arm_neon.c checks dotprod itself */
#endif
    default: return 0;
    }
}

const hachi_kernels *hachi_kernels_get(hachi_isa isa) {
    if (!cpu_has(isa)) return NULL;
    switch (isa) {
    case HACHI_ISA_REF: return hachi_kernels_ref();
    case HACHI_ISA_AVX2: return hachi_kernels_avx2();
    case HACHI_ISA_AVX512: return hachi_kernels_avx512();
    case HACHI_ISA_NEON: return hachi_kernels_neon();
    default: return NULL;
    }
}

static const hachi_kernels *best;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void pick_best(void) {
    const char *want = getenv("HACHI_ISA");
    if (want && *want) {
        for (int i = 0; i < HACHI_ISA_COUNT; i++)
            if (!strcmp(want, isa_names[i]) && (best = hachi_kernels_get((hachi_isa)i))) return;
        /* an unknown or unavailable name falls through to the automatic choice */
    }
    static const hachi_isa order[] = {HACHI_ISA_AVX2, HACHI_ISA_NEON, HACHI_ISA_REF};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if ((best = hachi_kernels_get(order[i]))) return;
}

const hachi_kernels *hachi_kernels_best(void) {
    pthread_once(&best_once, pick_best);
    return best;
}
