/* checkpoint: ring checkpoints of a session (hachi.h), the sliding-window rings' slots copied
 * at a position so that the session can go back there after it has gone past it by more than
 * the rings' spare slots allow a rewind. The full-attention caches keep every position and need
 * nothing; kv.c copies the rings' bytes, this file keeps them with the position and each
 * cache's first held position, and restores the session's position. Not on the hot path. */
#include "session.h"
#include "util.h"

struct hachi_checkpoint {
    const hachi_model *m;           /* of the session it was made for */
    int n_kv, n_ctx;
    int32_t pos;                    /* -1: empty */
    int *first;                     /* [n_kv] each cache's first held position (hachi_kv_first) at pos */
    size_t *off;                    /* [n_kv + 1] each cache's bytes in rings */
    char *rings;                    /* [off[n_kv]] the rings' slots */
};

hachi_status hachi_checkpoint_create(const hachi_session *s, hachi_checkpoint **out) {
    if (!out) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint: no output");
    *out = NULL;
    if (!s) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint: no session");
    hachi_checkpoint *c = hachi_calloc(1, sizeof *c);
    if (!c) return HACHI_ERR_NOMEM;
    c->m = s->m;
    c->n_kv = s->n_kv;
    c->n_ctx = s->n_ctx;
    c->pos = -1;
    c->first = hachi_calloc((size_t)s->n_kv + 1, sizeof *c->first);
    c->off = hachi_calloc((size_t)s->n_kv + 1, sizeof *c->off);
    if (c->off)
        for (int i = 0; i < s->n_kv; i++) c->off[i + 1] = c->off[i] + hachi_kv_ring_bytes(&s->kv[i]);
    if (!c->first || !c->off || !(c->rings = hachi_malloc(c->off[s->n_kv] + 1))) {
        hachi_checkpoint_free(c);
        return hachi_fail(HACHI_ERR_NOMEM, "checkpoint: cannot allocate the copy of the rings");
    }
    *out = c;
    return HACHI_OK;
}

void hachi_checkpoint_free(hachi_checkpoint *c) {
    if (!c) return;
    hachi_free(c->first);
    hachi_free(c->off);
    hachi_free(c->rings);
    hachi_free(c);
}

int32_t hachi_checkpoint_pos(const hachi_checkpoint *c) { return c ? c->pos : -1; }
void hachi_checkpoint_clear(hachi_checkpoint *c) { if (c) c->pos = -1; }
size_t hachi_checkpoint_bytes(const hachi_checkpoint *c) { return c ? c->off[c->n_kv] : 0; }

static bool fits(const hachi_session *s, const hachi_checkpoint *c) {
    return c->m == s->m && c->n_kv == s->n_kv && c->n_ctx == s->n_ctx;
}

hachi_status hachi_session_checkpoint_save(const hachi_session *s, hachi_checkpoint *c) {
    if (!s || !c) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint save: no session or checkpoint");
    if (!fits(s, c)) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint save: made for another session's plan");
    for (int i = 0; i < s->n_kv; i++) {
        hachi_kv_ring_copy(&s->kv[i], c->rings + c->off[i]);
        c->first[i] = hachi_kv_first(&s->kv[i], s->pos);
    }
    c->pos = s->pos;
    return HACHI_OK;
}

hachi_status hachi_session_checkpoint_restore(hachi_session *s, const hachi_checkpoint *c) {
    if (!s || !c) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint restore: no session or checkpoint");
    if (!fits(s, c)) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint restore: made for another session's plan");
    if (c->pos < 0) return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint restore: the checkpoint is empty");
    if (c->pos > s->pos)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "checkpoint restore: the checkpoint at %d is past the session's position %d",
                          c->pos, s->pos);
    for (int i = 0; i < s->n_kv; i++) {
        hachi_kv_ring_restore(&s->kv[i], c->rings + c->off[i]);
        hachi_kv_restored_from(&s->kv[i], c->first[i]);
        hachi_kv_rewound(&s->kv[i], c->pos);
    }
    s->pos = c->pos;
    s->logits_pos = -1;
    return HACHI_OK;
}
