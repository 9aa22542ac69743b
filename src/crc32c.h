/* crc32c: CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR
 * 0xFFFFFFFF), the checksum of the prompt-cache file's header and tensors. */
#ifndef HACHI_CRC32C_H
#define HACHI_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* The CRC of data[0..n) continuing crc (0 to start): hachi_crc32c(0, "123456789", 9) is
 * 0xE3069283, and crc(a ++ b) = hachi_crc32c(hachi_crc32c(0, a), b). */
uint32_t hachi_crc32c(uint32_t crc, const void *data, size_t n);

#endif
