// Normalizer implementations. NFC/NFD/NFKC/NFKD go through utf8proc_map.
#include "moeserve/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

class UnicodeNormalizer final : public Normalizer {
public:
    explicit UnicodeNormalizer(int options) : options_(options) {}

    std::string normalize(std::string_view text) const override {
        // Pure ASCII is invariant under every normalization form.
        bool ascii = true;
        for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
        if (ascii) return std::string(text);
        utf8proc_uint8_t* mapped = nullptr;
        utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(options_));
        if (n < 0) {
            raise(ErrorCode::kInvalidArgument, "Unicode normalization failed: {}",
                  utf8proc_errmsg(n));
        }
        std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
        std::free(mapped);
        return out;
    }

private:
    int options_;
};

class SequenceNormalizer final : public Normalizer {
public:
    explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
        : parts_(std::move(parts)) {}

    std::string normalize(std::string_view text) const override {
        std::string current(text);
        for (const auto& part : parts_) current = part->normalize(current);
        return current;
    }

private:
    std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, std::string_view where) {
    if (spec.is_null()) return nullptr;
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
        raise(ErrorCode::kInvalidModel, "{}: normalizer must be an object with a \"type\"; got {}",
              where, spec.dump().substr(0, 200));
    }
    const std::string type = spec["type"].get<std::string>();
    constexpr int kBase = UTF8PROC_STABLE;
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_COMPOSE);
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_DECOMPOSE);
    if (type == "NFKC") {
        return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    }
    if (type == "NFKD") {
        return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    }
    if (type == "Sequence") {
        std::vector<std::unique_ptr<Normalizer>> parts;
        for (const auto& part : spec.value("normalizers", nlohmann::json::array())) {
            auto normalizer = make_normalizer(part, where);
            if (normalizer != nullptr) parts.push_back(std::move(normalizer));
        }
        if (parts.empty()) return nullptr;
        if (parts.size() == 1) return std::move(parts.front());
        return std::make_unique<SequenceNormalizer>(std::move(parts));
    }
    raise(ErrorCode::kUnsupported,
          "{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)",
          where, type);
}

}  // namespace moeserve::tokenizer
