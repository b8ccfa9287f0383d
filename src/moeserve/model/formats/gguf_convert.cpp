#include "moeserve/model/formats/gguf_convert.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "moeserve/core/error.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/gguf.h"
#include "moeserve/model/formats/gguf_tokenizer.h"

namespace moeserve::model {

namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) raise(ErrorCode::kIo, "cannot read {}", path.string());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) raise(ErrorCode::kIo, "cannot write {}", path.string());
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// rows of f32 -> blocks of `type`
std::string quantize_rows(GgmlType type, const float* x, int64_t numel, int64_t row) {
    const uint64_t bytes = *ggml_nbytes(type, static_cast<uint64_t>(numel));
    std::string out(bytes, '\0');
    const uint64_t row_bytes = bytes / static_cast<uint64_t>(numel / row);
    for (int64_t r = 0; r < numel / row; ++r) {
        kernels::ops().quantize_gguf(type, x + r * row, out.data() + static_cast<uint64_t>(r) * row_bytes, row);
    }
    return out;
}

}  // namespace

GgmlType gguf_write_type(const std::string& gguf_name, const Shape& shape, GgmlType requested) {
    if (shape.rank() < 2 || ends_with(gguf_name, "ffn_gate_inp.weight") || ends_with(gguf_name, ".bias")) {
        return GgmlType::kF32;  // vectors, the router and biases (gpt-oss's stacked expert ones) stay exact
    }
    const int64_t row = shape[shape.rank() - 1];
    if (row % ggml_traits(requested).block_size == 0) return requested;
    if (row % 32 == 0) return GgmlType::kQ8_0;
    return GgmlType::kF32;
}

std::vector<std::filesystem::path> write_gguf_from_checkpoint(const std::filesystem::path& model_dir,
                                                              const std::filesystem::path& out,
                                                              const GgufWriteOptions& options) {
    const io::HfConfig config = io::HfConfig::from_model_dir(model_dir.string());
    const auto weights = io::WeightSource::open(model_dir);
    io::GgufWriter w;
    set_gguf_model_metadata(config, w);
    w.set_string("general.name", fmt::format("moeserve {}", model_dir.filename().string()));
    const bool has_tokenizer_json = std::filesystem::exists(model_dir / "tokenizer.json");
    if (has_tokenizer_json || options.tokenizer_json) {
        const std::filesystem::path tc = model_dir / "tokenizer_config.json";
        set_gguf_tokenizer_metadata(
            has_tokenizer_json ? read_file(model_dir / "tokenizer.json") : *options.tokenizer_json,
            std::filesystem::exists(tc) ? read_file(tc) : "", config.get_int("vocab_size"), model_dir.string(), w);
    }
    for (const GgufTensorEntry& e : gguf_tensor_table(config)) {
        if (!e.required && !e.convert && !weights->contains(e.names[0])) continue;
        std::vector<float> data;
        Shape shape;
        if (e.convert) {
            const Tensor t = e.convert(*weights);
            data.assign(t.as<float>(), t.as<float>() + t.numel());
            shape = t.shape();
        }
        for (const std::string& name : e.convert ? std::vector<std::string>{} : e.names) {
            Tensor t = weights->load_f32(name);
            if (e.kv_b) t = split_kv_b(t, e.heads, e.qk_nope, *e.kv_b);
            data.insert(data.end(), t.as<float>(), t.as<float>() + t.numel());
            shape = t.shape();
        }
        if (e.stacked && !e.convert) {
            std::vector<int64_t> dims{static_cast<int64_t>(e.names.size())};
            for (int64_t d : shape.dims()) dims.push_back(d);
            shape = Shape(std::span<const int64_t>(dims));
        }
        GgmlType requested = options.type;
        for (const auto& [part, t] : options.tensor_types) {
            if (e.gguf.find(part) != std::string::npos) {
                requested = t;
                break;
            }
        }
        const GgmlType type = gguf_write_type(e.gguf, shape, requested);
        w.add_tensor(e.gguf, type, shape, quantize_rows(type, data.data(), shape.numel(), shape[shape.rank() - 1]));
    }
    if (options.max_split_bytes > 0) {
        std::filesystem::path prefix = out;
        prefix.replace_extension();
        return w.write_splits(prefix, options.max_split_bytes);
    }
    w.write(out);
    return {out};
}

void write_dequantized_checkpoint(const std::filesystem::path& gguf, const std::filesystem::path& out_dir) {
    const GgufModel m = open_gguf_model(gguf);
    std::filesystem::create_directories(out_dir);
    io::SafetensorsWriter st;
    nlohmann::json types = nlohmann::json::object();
    for (const std::string& name : m.weights->names()) {
        const io::GgufBlocks b = *m.weights->gguf(name);
        types[name] = std::string(ggml_type_name(b.type));
        Tensor t(DType::kF32, b.shape);
        kernels::ops().dequantize_gguf(b.type, b.bytes.data(), t.as<float>(), b.shape.numel());
        st.add(name, std::move(t));
    }
    st.write(out_dir / "model.safetensors");
    write_file(out_dir / "config.json", m.config.json().dump(2));
    write_file(out_dir / "gguf_types.json", types.dump(1));
    if (const auto tok = gguf_tokenizer_files(m.file->metadata())) {
        write_file(out_dir / "tokenizer.json", tok->tokenizer_json);
        write_file(out_dir / "tokenizer_config.json", tok->config_json);
    }
}

}  // namespace moeserve::model
