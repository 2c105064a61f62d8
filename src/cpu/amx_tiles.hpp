// AMX tile instructions as inline assembly, for the kernels that use them (amx.hpp says when):
// GCC 12's AMX intrinsics are macros over assembly with no memory operands, so the compiler
// could move the stores of a tile's bytes past its load; these say "memory". A kernel loads its
// tile configuration at the start of each call and releases the tiles at its end.
// Dimension legend: a tile is up to 16 rows of up to 64 bytes.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
namespace ssmkit::cpu::amx {

// A tile configuration (palette 1): each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

inline void LoadTileConfig(const TileConfig& config) {
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}
inline void ReleaseTiles() { __asm__ volatile("tilerelease" ::: "memory"); }

template <int kTile>
inline void TileZero() {
  __asm__ volatile("tilezero %%tmm%c0" : : "i"(kTile));
}
// The tile's rows from rows, stride bytes apart.
template <int kTile>
inline void TileLoad(const void* rows, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2"
                   :
                   : "r"(rows), "r"(stride), "i"(kTile)
                   : "memory");
}
template <int kTile>
inline void TileStore(void* rows, int64_t stride) {
  __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)"
                   :
                   : "r"(rows), "r"(stride), "i"(kTile)
                   : "memory");
}

// C (int32) += A B, 4 byte products summed per dword: A unsigned, B signed (tdpbusd).
template <int kC, int kA, int kB>
inline void TileUnsignedBySigned() {
  __asm__ volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}
// The same with both signed (tdpbssd).
template <int kC, int kA, int kB>
inline void TileSignedBySigned() {
  __asm__ volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}
// C (f32) += A B, pairs of bf16 products per dword (tdpbf16ps).
template <int kC, int kA, int kB>
inline void TileBf16Pairs() {
  __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}

}  // namespace ssmkit::cpu::amx
#endif
