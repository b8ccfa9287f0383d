// Normalizers: NFC/NFD/NFKC/NFKD via utf8proc, including the NFC fast path for text that is
// already normalized.
#include "moeserve/tokenizer/normalizer.h"

#include <gtest/gtest.h>

#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

std::unique_ptr<Normalizer> make(const char* type) { return make_normalizer(nlohmann::json{{"type", type}}, "test"); }

TEST(NormalizerTest, UnicodeForms) {
    EXPECT_EQ(make("NFC")->normalize("e\u0301 \u212b \u1100\u1161"), "é Å 가");
    EXPECT_EQ(make("NFD")->normalize("é"), "e\u0301");
    EXPECT_EQ(make("NFKC")->normalize("ｆｕｌｌ①"), "full1");
    EXPECT_EQ(make("NFKD")->normalize("ﬁ"), "fi");
    EXPECT_EQ(make_normalizer(nlohmann::json::parse(R"({"type": "Sequence", "normalizers": []})"), "test"), nullptr);
}

TEST(NormalizerTest, NfcFastPathRangesAreNormalizedAlready) {
    // Every code point the fast path skips must be its own NFC form, alone and after a base
    // letter (it must not compose with what precedes it).
    auto nfc = make("NFC");
    auto nfd = make("NFD");
    const std::pair<char32_t, char32_t> ranges[] = {{0x80, 0x2FF},    {0x2010, 0x2027}, {0x2030, 0x205E},
                                                    {0x3000, 0x3029}, {0x3041, 0x3096}, {0x30A1, 0x30FA},
                                                    {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF01, 0xFF60}};
    // utf8proc marks code points that can be the second of a canonical composition pair with
    // comb_index >= 0x8000.
    auto combines_with_previous = [](char32_t c) {
        auto index = utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->comb_index;
        return index != 0xFFFF && index >= 0x8000;
    };
    for (auto [first, last] : ranges) {
        for (char32_t cp = first; cp <= last; ++cp) {
            const auto* property = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
            ASSERT_EQ(property->combining_class, 0) << "U+" << std::hex << static_cast<uint32_t>(cp);
            std::string alone;
            utf8_append(cp, alone);
            const std::string decomposed = nfd->normalize(alone);
            size_t n = 0;
            ASSERT_FALSE(combines_with_previous(utf8_decode(decomposed, 0, &n)))
                << "U+" << std::hex << static_cast<uint32_t>(cp);
            if (cp % 7 != 0 && last - first > 2000) continue;  // sample the big ranges below
            std::string s = "a";
            utf8_append(cp, s);
            utf8_append(0x304B, s);  // か: its own NFC form
            // Compare against the full path: NFC(NFD(s)) is computed by utf8proc.
            EXPECT_EQ(nfc->normalize(nfd->normalize(s)), s) << "U+" << std::hex << static_cast<uint32_t>(cp);
        }
    }
    EXPECT_EQ(nfc->normalize("\u304b\u3099"), "\u304c");  // kana + combining mark: full path
}

TEST(NormalizerTest, UnsupportedTypeIsNamed) {
    try {
        make("Lowercase");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("Lowercase"), std::string::npos);
    }
}

}  // namespace
}  // namespace moeserve::tokenizer
