// Writes src/moeserve/tokenizer/unicode_compat_table.inc: where the Unicode data of PCRE2 and
// utf8proc (what moeserve's tokenizer uses) disagrees with Hugging Face tokenizers' own, as
// observed by tools/goldens/probe_unicode.js in tests/data/tokenizer/hf_unicode_probe.json.
//   g++ -std=c++20 -O2 tools/unicode/gen_unicode_compat.cpp -lpcre2-8 -lutf8proc -o /tmp/gen &&
//   /tmp/gen tests/data/tokenizer/hf_unicode_probe.json > src/moeserve/tokenizer/unicode_compat_table.inc
// A standalone tool: it links the two libraries directly, not moeserve.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr char32_t kMax = 0x10FFFF;
bool is_surrogate(char32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

const std::vector<std::string> kCategories = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                              "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                              "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn"};

using CpSet = std::vector<bool>;

void append_utf8(char32_t cp, std::string& out) {
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

CpSet parse_ranges(const std::string& text) {
    CpSet set(kMax + 1, false);
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        if (part.empty()) continue;
        auto dash = part.find('-');
        unsigned long lo = std::stoul(part.substr(0, dash), nullptr, 16);
        unsigned long hi = dash == std::string::npos ? lo : std::stoul(part.substr(dash + 1), nullptr, 16);
        for (unsigned long cp = lo; cp <= hi; ++cp) set[cp] = true;
    }
    return set;
}

std::string decode_hex(const std::string& text) {
    std::string out;
    std::stringstream ss(text);
    std::string word;
    while (ss >> word) append_utf8(static_cast<char32_t>(std::stoul(word, nullptr, 16)), out);
    return out;
}

std::vector<char32_t> code_points_utf8(const std::string& text) {
    std::vector<char32_t> out;
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    utf8proc_ssize_t pos = 0, size = static_cast<utf8proc_ssize_t>(text.size());
    while (pos < size) {
        utf8proc_int32_t cp = 0;
        pos += utf8proc_iterate(p + pos, size - pos, &cp);
        out.push_back(static_cast<char32_t>(cp));
    }
    return out;
}

std::vector<char32_t> code_points(const std::string& hex) {
    std::vector<char32_t> out;
    std::stringstream ss(hex);
    std::string word;
    while (ss >> word) out.push_back(static_cast<char32_t>(std::stoul(word, nullptr, 16)));
    return out;
}

// Members of `pattern` (one code point) under PCRE2 with the flags moeserve's Regex uses.
CpSet pcre2_members(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
    if (code == nullptr) std::abort();
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
    CpSet set(kMax + 1, false);
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (is_surrogate(cp)) continue;
        std::string s;
        append_utf8(cp, s);
        int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data, nullptr);
        set[cp] = rc >= 0 && pcre2_get_ovector_pointer(data)[1] == s.size();
    }
    pcre2_match_data_free(data);
    pcre2_code_free(code);
    return set;
}

std::string nfc(const std::string& text) {
    utf8proc_uint8_t* out = nullptr;
    auto n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) std::abort();
    std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return s;
}

// "\x{lo}-\x{hi}..." for the code points in set (PCRE2 class items), and the range count.
std::string class_items(const CpSet& set, int* count) {
    std::string out;
    *count = 0;
    char buf[48];
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (!set[cp]) continue;
        char32_t hi = cp;
        while (hi < kMax && set[hi + 1]) ++hi;
        if (hi == cp)
            std::snprintf(buf, sizeof buf, "\\\\x{%X}", static_cast<unsigned>(cp));
        else
            std::snprintf(buf, sizeof buf, "\\\\x{%X}-\\\\x{%X}", static_cast<unsigned>(cp), static_cast<unsigned>(hi));
        out += buf;
        ++*count;
        cp = hi;
    }
    return out;
}

// A sorted table of [first, last] ranges of set, named `name`.
void print_ranges(const char* comment, const char* name, const CpSet& set) {
    std::printf("%s\nconstexpr char32_t %s[][2] = {\n", comment, name);
    int column = 0;
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (!set[cp]) continue;
        char32_t hi = cp;
        while (hi < kMax && set[hi + 1]) ++hi;
        std::printf("%s{0x%X, 0x%X},", column == 0 ? "    " : " ", static_cast<unsigned>(cp),
                    static_cast<unsigned>(hi));
        if (++column == 5) {
            std::printf("\n");
            column = 0;
        }
        cp = hi;
    }
    if (column != 0) std::printf("\n");
    std::printf("};\n");
}

size_t count(const CpSet& set) {
    size_t n = 0;
    for (bool b : set) n += b;
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s tests/data/tokenizer/hf_unicode_probe.json > .inc\n", argv[0]);
        return 2;
    }
    std::ifstream in(argv[1]);
    nlohmann::json probe = nlohmann::json::parse(in);

    // 1. General categories: HF's (Oniguruma) vs PCRE2's, per two-letter and one-letter name.
    std::map<std::string, CpSet> hf, ours;
    for (const auto& gc : kCategories) {
        hf[gc] = parse_ranges(probe["categories"][gc].get<std::string>());
        ours[gc] = pcre2_members("\\p{" + gc + "}");
    }
    for (const char major : std::string("LMNPSZC")) {
        std::string name(1, major);
        CpSet h(kMax + 1, false), o(kMax + 1, false);
        for (const auto& gc : kCategories) {
            if (gc[0] != major) continue;
            for (char32_t cp = 0; cp <= kMax; ++cp) {
                h[cp] = h[cp] || hf[gc][cp];
            }
        }
        o = pcre2_members("\\p{" + name + "}");
        hf[name] = h;
        ours[name] = o;
    }
    // Every code point whose class membership the rewrite changes: a text without any of them
    // matches the same under the plain pattern, which PCRE2 runs faster.
    CpSet regex_delta(kMax + 1, false);
    CpSet hf_space = parse_ranges(probe["white_space"].get<std::string>());
    CpSet our_space = pcre2_members("[\\s\\x{85}]");  // \s as Regex writes it without the delta
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (hf_space[cp] == our_space[cp]) continue;
        std::fprintf(stderr, "\\s differs at U+%04X\n", static_cast<unsigned>(cp));
        regex_delta[cp] = true;
    }

    // 2. NFC: replay HF's probes with utf8proc; a code point HF leaves wholly alone (no class,
    //    no decomposition, no composition) but utf8proc does not is an exception.
    const auto& n = probe["nfc"];
    std::map<std::string, std::string> single;
    for (const auto& e : n["single"]) {
        auto s = e.get<std::string>();
        single[decode_hex(s.substr(0, s.find('>')))] = decode_hex(s.substr(s.find('>') + 1));
    }
    CpSet swap1 = parse_ranges(n["after_ccc1_swapped"].get<std::string>());
    CpSet swap7 = parse_ranges(n["before_ccc7_swapped"].get<std::string>());
    CpSet hf_active(kMax + 1, false);  // code points HF's normalizer does something with
    for (char32_t cp = 0; cp <= kMax; ++cp) hf_active[cp] = swap1[cp] || swap7[cp];
    for (const auto& [input, output] : single) {
        for (char32_t cp : code_points_utf8(input)) hf_active[cp] = true;
    }
    std::vector<std::pair<std::string, std::string>> icu;
    for (const auto& e : n["icu_nfd"]) {
        auto s = e.get<std::string>();
        auto in_hex = s.substr(0, s.find('>'));
        auto out_hex = s.substr(s.find('>') + 1);
        icu.emplace_back(in_hex, out_hex);
        if (in_hex != out_hex) {
            for (char32_t cp : code_points(in_hex)) hf_active[cp] = true;
        }
    }
    std::map<char32_t, unsigned> hf_masks;
    {
        std::stringstream ss(n["class_masks"].get<std::string>());
        std::string part;
        while (std::getline(ss, part, ',')) {
            auto colon = part.find(':');
            auto range = part.substr(0, colon);
            auto dash = range.find('-');
            unsigned long lo = std::stoul(range.substr(0, dash), nullptr, 16);
            unsigned long hi = dash == std::string::npos ? lo : std::stoul(range.substr(dash + 1), nullptr, 16);
            unsigned mask = static_cast<unsigned>(std::stoul(part.substr(colon + 1), nullptr, 16));
            for (unsigned long cp = lo; cp <= hi; ++cp) hf_masks[static_cast<char32_t>(cp)] = mask;
        }
    }
    std::vector<char32_t> marks = code_points(n["class_marks"].get<std::string>());

    CpSet differs(kMax + 1, false);
    size_t num_class_only = 0;
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (is_surrogate(cp)) continue;
        std::string x;
        append_utf8(cp, x);
        auto it = single.find(x);
        std::string expected = it == single.end() ? x : it->second;
        if (nfc("|" + x) != "|" + expected) differs[cp] = true;
        if (it != single.end()) continue;
        const std::string m1 = "\u0334", m7 = "\u093C";
        if (nfc("|" + x + m1) != (swap1[cp] ? "|" + m1 + x : "|" + x + m1)) differs[cp] = true;
        if (nfc("|" + m7 + x) != (swap7[cp] ? "|" + x + m7 : "|" + m7 + x)) differs[cp] = true;
        if (swap1[cp] || swap7[cp]) {
            unsigned mask = 0;
            for (size_t i = 0; i < marks.size(); ++i) {
                std::string input = "|" + x;
                append_utf8(marks[i], input);
                if (nfc(input) != input) mask |= 1u << i;
            }
            if (mask != hf_masks[cp]) {
                differs[cp] = true;
                ++num_class_only;
            }
        }
    }
    size_t num_compositions = 0;
    for (const auto& [in_hex, out_hex] : icu) {
        if (nfc("|" + decode_hex(in_hex)) == "|" + decode_hex(out_hex)) continue;
        ++num_compositions;
        for (char32_t cp : code_points(in_hex)) {
            if (!hf_active[cp]) differs[cp] = true;
        }
    }
    int failures = 0;
    for (char32_t cp = 0; cp <= kMax; ++cp) {
        if (differs[cp] && hf_active[cp]) {
            std::fprintf(stderr, "U+%04X: HF's normalizer knows it but disagrees with utf8proc\n",
                         static_cast<unsigned>(cp));
            ++failures;
        }
    }

    // 3. The table.
    std::printf(
        "// Generated by tools/unicode/gen_unicode_compat.cpp from tests/data/tokenizer/\n"
        "// hf_unicode_probe.json, which %s wrote. Do not edit: rerun both\n"
        "// when PCRE2, utf8proc or the npm package changes (see tools/unicode/README.md).\n"
        "//\n"
        "// Regex classes: HF's Oniguruma has Unicode 16.0; PCRE2 %d.%d has Unicode 14.0.\n"
        "// NFC: HF's unicode-normalization-alignments crate has Unicode 9.0; utf8proc %s has %s.\n"
        "// NFC exceptions: %zu code points with a combining class or a composition HF does not\n"
        "// know (%zu of HF's compositions probes differ).\n\n",
        probe["generator"].get<std::string>().c_str(), PCRE2_MAJOR, PCRE2_MINOR, utf8proc_version(),
        utf8proc_unicode_version(), count(differs), num_compositions);
    std::printf(
        "// {category, code points HF has and PCRE2 lacks, code points PCRE2 has and HF lacks},\n"
        "// as PCRE2 class items.\n");
    std::printf("constexpr CategoryDelta kCategoryDeltas[] = {\n");
    std::vector<std::string> names = kCategories;
    for (const char* major : {"L", "M", "N", "P", "S", "Z", "C"}) names.emplace_back(major);
    for (const auto& name : names) {
        CpSet add(kMax + 1, false), remove(kMax + 1, false);
        for (char32_t cp = 0; cp <= kMax; ++cp) {
            if (is_surrogate(cp)) continue;
            add[cp] = hf[name][cp] && !ours[name][cp];
            remove[cp] = !hf[name][cp] && ours[name][cp];
            if (add[cp] || remove[cp]) regex_delta[cp] = true;
        }
        int add_ranges = 0, remove_ranges = 0;
        std::string a = class_items(add, &add_ranges), r = class_items(remove, &remove_ranges);
        if (add_ranges == 0 && remove_ranges == 0) continue;
        std::printf("    // %s: +%zu -%zu code points\n", name.c_str(), count(add), count(remove));
        std::printf("    {\"%s\",\n     \"%s\",\n     \"%s\"},\n", name.c_str(), a.c_str(), r.c_str());
        std::fprintf(stderr, "%s: +%zu -%zu\n", name.c_str(), count(add), count(remove));
    }
    std::printf("};\n\n");
    print_ranges("// Code points [first, last] in some delta above or where \\s differs.", "kRegexDeltaCodePoints",
                 regex_delta);
    std::printf("\n");
    print_ranges("// Code points [first, last] that HF's normalizer leaves alone and utf8proc does not.",
                 "kNormalizerUnknown", differs);
    std::fprintf(stderr, "NFC: %zu exception code points (%zu by class only), %zu compositions differ\n",
                 count(differs), num_class_only, num_compositions);
    return failures == 0 ? 0 : 1;
}
