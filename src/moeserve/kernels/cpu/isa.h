// The CPU instruction-set level the kernels run at, chosen once per process:
// the best level this CPU and the operating system support (CPUID feature bits
// and the XCR0 state the OS saves), or the level
// MOESERVE_ISA=ref|avx2|avx512|amx names, refused if the CPU lacks it. Every
// kernel family that has per-ISA code reads it through its own dispatch;
// nothing ISA-specific lives in a header. The tree itself is built for
// x86-64-v3, so avx2 is the floor of any CPU that runs it.
//   ref     scalar matmul tiles (linear bf16/f32/int8/int4, MoE experts) and the
//           scalar GGUF dot products (no GGUF tiles); the other kernels stay AVX2
//   avx2    AVX2 + FMA (x86-64-v3): every kernel, but the Q2_K / Q3_K GGUF dot
//           products run the scalar reference
//   avx512  AVX-512 F/BW/VL/DQ + AVX512_BF16 + AVX512_VNNI (Zen4, Sapphire Rapids
//           and later): bf16 GEMV/GEMM (f32 FMA on widened weights; vdpbf16ps
//           when activations are rounded), vpdpbusd int8 GEMV/GEMM, the GGUF
//           VNNI dot products and tiles, and the flash attention of the GQA paged
//           (paged_attention_avx512.cpp) and MLA (mla_attention_avx512.cpp) caches
//   amx     avx512 plus AMX-TILE/BF16/INT8 with the XTILEDATA permission granted;
//           no AMX tile kernels yet, so it runs the avx512 kernels. Only chosen
//           when forced.
#pragma once

#include <string>
#include <string_view>

namespace moeserve::kernels::cpu {

enum class Isa { kRef = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const char* isa_name(Isa isa);

// What CPUID + XCR0 report (probed once).
struct CpuFeatures {
    bool avx2 = false, fma = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512_bf16 = false, avx512_vnni = false;
    bool os_avx = false, os_avx512 = false;  // XCR0: YMM state; opmask + ZMM state
    bool amx_tile = false, amx_bf16 = false, amx_int8 = false,
         os_amx = false;  // os_amx: XCR0 tile state
    std::string brand;    // e.g. "AMD EPYC 9R14 96-Core Processor"
    std::string vendor;   // CPUID leaf 0: "AuthenticAMD", "GenuineIntel", ...
    int family = 0;       // CPUID leaf 1: base family, plus the extended family when it is 0xf
};
const CpuFeatures& cpu_features();

// True when this CPU and OS can run `isa` (amx also requests the XTILEDATA
// permission).
bool isa_supported(Isa isa);
// Why `isa` is not supported ("" when it is): the first missing feature.
std::string isa_missing(Isa isa);
// The best level auto-selection picks: avx512 where supported, else avx2 (amx
// only when forced).
Isa best_isa();

// The level in use. The first call chooses it (MOESERVE_ISA, else best_isa())
// and throws moeserve::Error if MOESERVE_ISA is malformed or names a level this
// CPU lacks; call it at startup so that error comes out there.
Isa active_isa();
// Forces a level (tests, benchmarks); throws moeserve::Error if unsupported.
// Not thread-safe against kernels running at the same time.
void set_active_isa(Isa isa);
// "ref" | "avx2" | "avx512" | "amx" -> Isa; throws moeserve::Error otherwise.
Isa parse_isa(std::string_view name);
// MOESERVE_BF16_ACTIVATIONS=round: the avx512 bf16 GEMM (prefill) rounds activations to bf16
// once (vdpbf16ps on bf16 pairs, ~1e-3 relative logit error) instead of the default f32 GEMM on
// weights widened to f32 (f32 accuracy). Read once; "split" or unset is the default; anything
// else throws moeserve::Error.
bool bf16_round_activations();
// Forces it (tests, benchmarks).
void set_bf16_round_activations(bool round);
// How the avx512 GEMVs read the weights for the few rows of decode (bf16: 1-3 rows of x at
// k < 2048; int8: 1-2 rows at every k): false = one
// weight row at a time (one sequential stream), true = blocks of 4 interleaved rows with the
// next block prefetched. Which is faster depends on the core's prefetchers, not on the ISA: one
// row on AMD Zen4, the row blocks on Intel Xeon (Emerald Rapids) and AMD Zen5 (docs/kernels.md
// has the measurements). Chosen once from the CPU vendor and family (one row on AMD up to family
// 25, Zen3/Zen4; row blocks elsewhere) unless MOESERVE_GEMV_ROW_BLOCKS=0|1 says otherwise; any
// other value throws moeserve::Error.
bool gemv_row_blocks();
// Forces it (tests, benchmarks).
void set_gemv_row_blocks(bool on);
// Whether bf16 linear weights are repacked at load into panels (bf16_panels.h): on at the avx512
// and amx levels, whose panel kernel reads the lm_head at 0.95 of the STREAM rate for one row,
// 2.2-3.2x the row-major kernels' rate for 4-8 rows and runs 1.3-1.7x their GFLOP/s at 32
// (docs/performance.md), unless the bf16 GEMM rounds
// its activations (bf16_round_activations: the panels are f32 FMA only). Off below avx512, whose
// row-major kernels were never measured against a panel kernel. MOESERVE_BF16_PANELS=0|1 says
// otherwise (read once; any other value throws moeserve::Error).
bool bf16_weight_panels();
// Forces it (tests, benchmarks); weights repacked before stay repacked.
void set_bf16_weight_panels(bool on);
// Whether GGUF weights with a packed layout are repacked at load into groups of 8 interleaved
// rows (gguf_packed.h): on at the avx2 and avx512 levels, whose packed kernels were measured
// faster than their kernels on the stored rows (docs/kernels.md), off at ref (its packed tile
// unpacks each row). MOESERVE_GGUF_PACKED=0|1 says otherwise (read once; any other value throws
// moeserve::Error).
bool gguf_packed_rows();
// Forces it (tests, benchmarks); matrices packed before stay packed.
void set_gguf_packed_rows(bool on);

// One line for logs and `moeserve env`: "isa=avx512 (best avx512; cpu: ...;
// avx512_bf16 avx512_vnni)".
std::string isa_summary();

}  // namespace moeserve::kernels::cpu
