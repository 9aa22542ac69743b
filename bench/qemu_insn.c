/* qemu_insn: a qemu-user plugin that counts the guest instructions a program executes, and of
 * them the int8 multiply instructions of AArch64 (smmla; sdot, by vector and by element), so
 * that the NEON kernels, which this x86 machine can only emulate, get a stable measure: the
 * instruction count of a kernel, like callgrind's on x86 (qemu's time says nothing of an ARM
 * core's). It declares the few functions of QEMU 7.2's plugin API it uses (Debian ships no
 * qemu-plugin.h) and prints one line at exit:
 *     insns N smmla N sdot N
 * Build and use (bench_neon_gemm.c runs it):
 *     gcc -O2 -shared -fPIC -fvisibility=hidden -o /tmp/qemu_insn.so bench/qemu_insn.c
 *     qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin /tmp/qemu_insn.so PROGRAM */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op, void *ptr,
                                                uint64_t imm);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t total, smmla, sdot;   /* one vCPU: qemu-user runs a single-threaded program's one */

/* At translation: the block's length goes to total on each execution, and each multiply by its
 * encoding (the disassembler of qemu 7.2 prints these as .byte): SMMLA 0x4e80a400 (Rm, Rn, Rd
 * free), SDOT by vector 0x0e809400 and by element 0x0f80e000 (Q, and the index bits, free). */
static void translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &total, n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t op;
        memcpy(&op, qemu_plugin_insn_data(insn), sizeof op);
        uint64_t *c = (op & 0xffe0fc00u) == 0x4e80a400u                                              ? &smmla
                      : (op & 0xbfe0fc00u) == 0x0e809400u || (op & 0xbfc0f400u) == 0x0f80e000u ? &sdot
                                                                                                 : NULL;
        if (c) qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, c, 1);
    }
}

static void report(qemu_plugin_id_t id, void *unused) {
    (void)id;
    (void)unused;
    fprintf(stderr, "insns %llu smmla %llu sdot %llu\n", (unsigned long long)total, (unsigned long long)smmla,
            (unsigned long long)sdot);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                                               char **argv) {
    (void)info;
    (void)argc;
    (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
