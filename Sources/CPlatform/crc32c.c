// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by every checksum in
// FORMAT.md. The hardware path is chosen once at run time; the table for the software
// path is built exactly once (pthread_once), so first use from many threads is safe.
#include "cplatform.h"
#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : (c >> 1);
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t cplatform_crc32c_extend_software(uint32_t crc, const void *data, size_t len) {
    pthread_once(&table_once, init_table);
    const uint8_t *p = data;
    crc = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
#endif
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
              table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

int cplatform_crc32c_hardware_available(void) { return __builtin_cpu_supports("sse4.2") ? 1 : 0; }

uint32_t cplatform_crc32c_extend(uint32_t crc, const void *data, size_t len) {
    // Every thread computes the same answer; relaxed atomics make the race well-defined.
    static int hw = -1;
    int known = __atomic_load_n(&hw, __ATOMIC_RELAXED);
    if (known < 0) {
        known = cplatform_crc32c_hardware_available();
        __atomic_store_n(&hw, known, __ATOMIC_RELAXED);
    }
    return known ? crc32c_sse42(crc, data, len) : cplatform_crc32c_extend_software(crc, data, len);
}

#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>

int cplatform_crc32c_hardware_available(void) { return 1; }

uint32_t cplatform_crc32c_extend(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __crc32cd(c, v);
        p += 8;
        len -= 8;
    }
    while (len--) c = __crc32cb(c, *p++);
    return ~c;
}

#else
int cplatform_crc32c_hardware_available(void) { return 0; }

uint32_t cplatform_crc32c_extend(uint32_t crc, const void *data, size_t len) {
    return cplatform_crc32c_extend_software(crc, data, len);
}
#endif
