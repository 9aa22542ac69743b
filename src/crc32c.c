/* crc32c: table-driven CRC-32C, eight bytes a step ("slicing by 8": table t maps a byte to
 * its CRC contribution t bytes further on, so eight lookups fold one 64-bit word), the tail
 * a byte at a time. The tables are built once, on first use. */
#include <pthread.h>
#include <string.h>
#include "crc32c.h"

#define CRC32C_POLY 0x82F63B78u   /* 0x1EDC6F41 bit-reversed */

static uint32_t table[8][256];    /* [t][byte] */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t hachi_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&table_once, table_init);
    const unsigned char *p = data;
    crc = ~crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; n -= 8, p += 8) {   /* the word's first byte is its low byte */
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^ table[4][(w >> 24) & 0xff] ^
              table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
    }
#endif
    for (; n; n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
