/* kernels/dispatch: assembles the kernel table of every ISA and picks one from CPU
 * features, once. Each table starts as a copy of its base (AVX2 and NEON: ref's, so the
 * cold entries stay scalar; AVX-512: AVX2's, so it overrides only its 512-bit kernels) and
 * its ISA file's filler overrides the entries it accelerates. A table exists only when this
 * build compiled the ISA in (the filler returns 1) and the running CPU has the
 * instructions (fillers are never run otherwise: their files are built with -m flags);
 * $HACHI_ISA=ref|avx2|avxvnni|avx512|neon forces one when available. The automatic choice is
 * the widest table the CPU runs: AVX-512 (with VNNI) where the CPU has it (its kernels are
 * tested against ref on such a CPU by the kernel test, the model tests then run on it), else
 * AVX-VNNI (AVX2's table with the VEX vpdpbusd int4 kernels), AVX2, NEON or ref. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

static const char *const isa_names[HACHI_ISA_COUNT] = {"ref", "avx2", "avx512", "neon", "avxvnni"};

const char *hachi_isa_name(hachi_isa isa) {
    return (unsigned)isa < HACHI_ISA_COUNT ? isa_names[isa] : "unknown";
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c") */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
/* AMX-TILE and AMX-INT8 are CPUID.(7,0):EDX bits 24 and 25; a process must also ask Linux for
 * the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA 18) before its first
 * tile instruction, which a kernel without AMX support refuses. */
static int has_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & (3u << 24)) != (3u << 24)) return 0;
#if defined(__linux__) && defined(__x86_64__)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
#else
    return 0;
#endif
}
/* AVX-VNNI is CPUID.(7,1):EAX bit 4 (older compilers' __builtin_cpu_supports lack it) */
static int has_avxvnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
#endif

static int cpu_has(hachi_isa isa) {
    switch (isa) {
    case HACHI_ISA_REF: return 1;
#if defined(__x86_64__) || defined(__i386__)
    case HACHI_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case HACHI_ISA_AVXVNNI: return cpu_has(HACHI_ISA_AVX2) && has_avxvnni();
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

static int has_dotprod(void) {
#if defined(__aarch64__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return 0;
#endif
}

static int has_i8mm(void) {
#if defined(__aarch64__)
    return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
    return 0;
#endif
}

static hachi_kernels tables[HACHI_ISA_COUNT];
static hachi_kernels neon_sdot;             /* the NEON table without i8mm, where the CPU has it */
static const hachi_kernels *neon_sdot_avail;
static const hachi_kernels *avail[HACHI_ISA_COUNT];   /* NULL: not compiled in or not on this CPU */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* isa's table: a copy of base's with isa and name set, then the ISA file's entries */
static void assemble(hachi_isa isa, hachi_isa base) {
    if (!avail[base] || !cpu_has(isa)) return;
    hachi_kernels *t = &tables[isa];
    *t = *avail[base];
    t->isa = isa;
    t->name = isa_names[isa];
    int ok = 0;
    switch (isa) {
    case HACHI_ISA_AVX2: ok = hachi_kernels_fill_avx2(t); break;
    case HACHI_ISA_AVXVNNI: ok = hachi_kernels_fill_avxvnni(t); break;
    case HACHI_ISA_AVX512:
        ok = hachi_kernels_fill_avx512(t);
#if defined(__x86_64__)
        if (ok && has_amx()) hachi_kernels_fill_amx(t);
#endif
        break;
    case HACHI_ISA_NEON:
        if (has_dotprod() && has_i8mm()) {
            neon_sdot = *t;
            if (hachi_kernels_fill_neon(&neon_sdot, 1, 0)) neon_sdot_avail = &neon_sdot;
        }
        ok = hachi_kernels_fill_neon(t, has_dotprod(), has_i8mm());
        break;
    default: break;
    }
    if (ok) avail[isa] = t;
}

static void build_tables(void) {
    hachi_kernels *r = &tables[HACHI_ISA_REF];
    hachi_kernels_fill_ref(r);
    r->isa = HACHI_ISA_REF;
    r->name = isa_names[HACHI_ISA_REF];
    avail[HACHI_ISA_REF] = r;
    assemble(HACHI_ISA_AVX2, HACHI_ISA_REF);
    assemble(HACHI_ISA_AVXVNNI, HACHI_ISA_AVX2);
    assemble(HACHI_ISA_AVX512, HACHI_ISA_AVX2);
    assemble(HACHI_ISA_NEON, HACHI_ISA_REF);
}

const hachi_kernels *hachi_kernels_get(hachi_isa isa) {
    if ((unsigned)isa >= HACHI_ISA_COUNT) return NULL;
    pthread_once(&tables_once, build_tables);
    return avail[isa];
}

const hachi_kernels *hachi_kernels_ref(void) { return hachi_kernels_get(HACHI_ISA_REF); }

const hachi_kernels *hachi_kernels_neon_sdot(void) {
    pthread_once(&tables_once, build_tables);
    return neon_sdot_avail;
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
    static const hachi_isa order[] = {HACHI_ISA_AVX512, HACHI_ISA_AVXVNNI, HACHI_ISA_AVX2, HACHI_ISA_NEON, HACHI_ISA_REF};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if ((best = hachi_kernels_get(order[i]))) return;
}

const hachi_kernels *hachi_kernels_best(void) {
    pthread_once(&best_once, pick_best);
    return best;
}
