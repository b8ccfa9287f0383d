// CPUID / XCR0 probing and the process-wide ISA choice (see isa.h).
#include "moeserve/kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "moeserve/core/error.h"

namespace moeserve::kernels::cpu {
namespace {

uint64_t read_xcr0() {
    uint32_t lo = 0, hi = 0;
    // xgetbv with ecx = 0; inline asm so this file needs no -mxsave.
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t{hi} << 32) | lo;
}

CpuFeatures probe() {
    CpuFeatures f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
    const unsigned max_leaf = a;
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);  // the vendor string is in ebx, edx, ecx, in that order
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.vendor = vendor;
    __get_cpuid(1, &a, &b, &c, &d);
    const unsigned base_family = (a >> 8) & 0xf;
    f.family = int(base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family);
    const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f.fma = (c >> 12) & 1;
    uint64_t xcr0 = 0;
    if (osxsave) xcr0 = read_xcr0();
    f.os_avx = avx && (xcr0 & 0x6) == 0x6;                           // SSE + YMM state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;                 // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & (uint64_t{3} << 17)) == (uint64_t{3} << 17);  // XTILECFG, XTILEDATA
    if (max_leaf >= 7) {
        __get_cpuid_count(7, 0, &a, &b, &c, &d);
        const unsigned sub_leaves = a;
        f.avx2 = (b >> 5) & 1;
        f.avx512f = (b >> 16) & 1;
        f.avx512dq = (b >> 17) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        f.avx512_vnni = (c >> 11) & 1;
        f.amx_bf16 = (d >> 22) & 1;
        f.amx_tile = (d >> 24) & 1;
        f.amx_int8 = (d >> 25) & 1;
        if (sub_leaves >= 1) {
            __get_cpuid_count(7, 1, &a, &b, &c, &d);
            f.avx512_bf16 = (a >> 5) & 1;
        }
    }
    unsigned brand[12] = {};
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (unsigned leaf = 0; leaf < 3; ++leaf) {
            __get_cpuid(0x80000002 + leaf, &brand[leaf * 4], &brand[leaf * 4 + 1], &brand[leaf * 4 + 2],
                        &brand[leaf * 4 + 3]);
        }
        char s[49] = {};
        std::memcpy(s, brand, 48);
        f.brand = s;
        while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
        while (!f.brand.empty() && f.brand.front() == ' ') f.brand.erase(f.brand.begin());
    }
    return f;
}

// Linux: a process must ask for the AMX tile data state before using it.
bool request_amx_permission() {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::atomic<int> g_isa{-1};
std::mutex g_init_mu;

Isa choose_from_env() {
    const char* env = std::getenv("MOESERVE_ISA");
    if (env == nullptr || *env == '\0') return best_isa();
    const Isa isa = parse_isa(env);
    if (!isa_supported(isa)) {
        raise(ErrorCode::kUnsupported,
              "MOESERVE_ISA={} is not supported on this CPU ({}): {}; best here is "
              "{}",
              env, cpu_features().brand, isa_missing(isa), isa_name(best_isa()));
    }
    return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kRef:
            return "ref";
        case Isa::kAvx2:
            return "avx2";
        case Isa::kAvx512:
            return "avx512";
        case Isa::kAmx:
            return "amx";
    }
    return "?";
}

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = probe();
    return f;
}

std::string isa_missing(Isa isa) {
    const CpuFeatures& f = cpu_features();
    if (isa == Isa::kRef) return "";
    if (!f.avx2 || !f.fma) return "no AVX2/FMA";
    if (!f.os_avx) return "the OS does not enable the YMM state (XCR0)";
    if (isa == Isa::kAvx2) return "";
    if (!f.avx512f || !f.avx512bw || !f.avx512vl || !f.avx512dq) return "no AVX-512 F/BW/VL/DQ";
    if (!f.avx512_bf16) return "no AVX512_BF16";
    if (!f.avx512_vnni) return "no AVX512_VNNI";
    if (!f.os_avx512) return "the OS does not enable the opmask/ZMM state (XCR0)";
    if (isa == Isa::kAvx512) return "";
    if (!f.amx_tile || !f.amx_bf16 || !f.amx_int8) return "no AMX-TILE/BF16/INT8";
    if (!f.os_amx) return "the OS does not enable the AMX tile state (XCR0)";
    static const bool granted = request_amx_permission();
    if (!granted) return "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) was refused";
    return "";
}

bool isa_supported(Isa isa) { return isa_missing(isa).empty(); }

Isa best_isa() { return isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2; }

Isa parse_isa(std::string_view name) {
    if (name == "ref") return Isa::kRef;
    if (name == "avx2") return Isa::kAvx2;
    if (name == "avx512") return Isa::kAvx512;
    if (name == "amx") return Isa::kAmx;
    raise(ErrorCode::kInvalidArgument, "MOESERVE_ISA='{}' is not one of ref, avx2, avx512, amx", name);
}

Isa active_isa() {
    const int v = g_isa.load(std::memory_order_relaxed);
    if (v >= 0) return static_cast<Isa>(v);
    std::lock_guard<std::mutex> lock(g_init_mu);
    if (g_isa.load() < 0) g_isa.store(static_cast<int>(choose_from_env()));
    return static_cast<Isa>(g_isa.load());
}

void set_active_isa(Isa isa) {
    if (!isa_supported(isa)) {
        raise(ErrorCode::kUnsupported, "ISA {} is not supported on this CPU ({}): {}", isa_name(isa),
              cpu_features().brand, isa_missing(isa));
    }
    g_isa.store(static_cast<int>(isa));
}

namespace {

// A process-wide on/off choice of the kernels: read once from the environment variable `name`
// (the spelling `off` or `on`; unset or empty: the default), or forced by set() (tests,
// benchmarks). Any other value is a moeserve::Error naming the variable.
class EnvSwitch {
public:
    constexpr EnvSwitch(const char* name, const char* off, const char* on) : name_(name), off_(off), on_(on) {}

    bool get(bool (*default_value)()) {
        int v = state_.load(std::memory_order_relaxed);
        if (v >= 0) return v == 1;
        const char* env = std::getenv(name_);
        const std::string_view s = env == nullptr ? "" : env;
        if (!s.empty() && s != off_ && s != on_) {
            raise(ErrorCode::kInvalidArgument, "{}='{}' is not one of {}, {}", name_, s, off_, on_);
        }
        v = (s.empty() ? default_value() : s == on_) ? 1 : 0;
        state_.store(v);
        return v == 1;
    }
    void set(bool on) { state_.store(on ? 1 : 0); }

private:
    const char* name_;
    const char* off_;
    const char* on_;
    std::atomic<int> state_{-1};
};

EnvSwitch g_round("MOESERVE_BF16_ACTIVATIONS", "split", "round");
EnvSwitch g_row_blocks("MOESERVE_GEMV_ROW_BLOCKS", "0", "1");
EnvSwitch g_gguf_packed("MOESERVE_GGUF_PACKED", "0", "1");
EnvSwitch g_bf16_panels("MOESERVE_BF16_PANELS", "0", "1");
// AMD family 0x19 (25: Zen3/Zen4) streams one weight row at a time faster; Zen5 (family 0x1a = 26)
// the row blocks, like Intel (docs/kernels.md has the measurements).
constexpr int kLastAmdFamilyRowByRow = 25;

}  // namespace

bool bf16_round_activations() {
    return g_round.get([] { return false; });
}

void set_bf16_round_activations(bool round) { g_round.set(round); }

bool gemv_row_blocks() {
    return g_row_blocks.get([] {
        const CpuFeatures& f = cpu_features();
        return f.vendor != "AuthenticAMD" || f.family > kLastAmdFamilyRowByRow;
    });
}

void set_gemv_row_blocks(bool on) { g_row_blocks.set(on); }

bool gguf_packed_rows() {
    return g_gguf_packed.get([] { return active_isa() != Isa::kRef; });
}

void set_gguf_packed_rows(bool on) { g_gguf_packed.set(on); }

bool bf16_weight_panels() {
    return g_bf16_panels.get([] { return active_isa() >= Isa::kAvx512 && !bf16_round_activations(); });
}

void set_bf16_weight_panels(bool on) { g_bf16_panels.set(on); }

std::string isa_summary() {
    const CpuFeatures& f = cpu_features();
    std::string s = std::string("isa=") + isa_name(active_isa()) + " (best " + isa_name(best_isa()) +
                    "; cpu: " + (f.brand.empty() ? "unknown" : f.brand) + "; has";
    auto add = [&](bool on, const char* name) {
        if (on) s += std::string(" ") + name;
    };
    add(f.avx2 && f.os_avx, "avx2");
    add(f.avx512f && f.os_avx512, "avx512f");
    add(f.avx512_bf16, "avx512_bf16");
    add(f.avx512_vnni, "avx512_vnni");
    add(f.amx_tile && f.os_amx, "amx");
    if (active_isa() >= Isa::kAvx512) {
        s += gemv_row_blocks() ? "; decode gemv in row blocks" : "; decode gemv row by row";
        if (bf16_round_activations()) s += "; bf16 prefill activations rounded";
        if (bf16_weight_panels()) s += "; bf16 linears in panels";
    }
    return s + ")";
}

}  // namespace moeserve::kernels::cpu
