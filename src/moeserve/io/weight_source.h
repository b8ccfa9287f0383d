// WeightSource: the tensors of a Hugging Face model directory by name, across a single
// model.safetensors, a sharded checkpoint with model.safetensors.index.json, or loose
// *.safetensors files. Views are zero-copy into read-only mmaps. Depends on core only.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/tensor.h"
#include "moeserve/io/gguf_file.h"
#include "moeserve/io/safetensors.h"

namespace moeserve::io {

// A GGUF tensor as stored (its blocks, in a read-only mapping kept alive by `owner`), or one
// [index] slice of a stacked one (the experts of ffn_gate_exps [n_expert, inter, hidden]).
struct GgufBlocks {
    GgmlType type = GgmlType::kF32;
    Shape shape;  // outermost first; a slice drops the stacked dim
    std::span<const uint8_t> bytes;
    std::shared_ptr<const MappedFile> owner;
};

// A checkpoint name's place in a GGUF file: the tensor, and for a stacked tensor the index along
// its outermost dim (-1: the whole tensor).
struct GgufRef {
    std::string tensor;
    int64_t index = -1;
};

// Immutable after open(): every const method is safe to call from many threads (ranks load their
// shards in parallel).
class WeightSource {
public:
    // Opens `model_dir`, preferring, in order:
    //   1. model.safetensors.index.json and every shard it lists;
    //   2. model.safetensors;
    //   3. the one other *.safetensors.index.json (e.g. ModelSlim's quant_model_weights.safetensors.index.json);
    //   4. every *.safetensors file in the directory (a tensor in two of them is an error).
    // Every file is mapped and its header validated now. Throws Error naming the directory or
    // file: kNotFound (no directory, no checkpoint, a shard listed in the index is missing),
    // kInvalidModel / kUnsupported (malformed index or file), kIo.
    static std::unique_ptr<WeightSource> open(const std::filesystem::path& model_dir);

    // The same checkpoint under other names (a converter from another layout, e.g. MindFormers):
    // exactly the names of `aliases` (new name -> name in `base`, zero-copy) and of `owned`
    // (tensors made in memory). Lookups by a new name behave as above; error messages and
    // stored_name() give the name in the file. Every alias must exist in base (MOESERVE_CHECK:
    // the converter checks first); a name in both maps is a bug too.
    static std::unique_ptr<WeightSource> renamed(std::unique_ptr<WeightSource> base,
                                                 const std::map<std::string, std::string>& aliases,
                                                 std::map<std::string, Tensor> owned);

    // A GGUF checkpoint read under the checkpoint names of `names` (name -> tensor [+ index];
    // model/formats/gguf.cpp makes the map), plus `owned` tensors made in memory from the file's
    // (a checkpoint tensor the file stores in another layout, such as DeepSeek's kv_b_proj as
    // attn_k_b + attn_v_b). Every tensor must exist in `gguf` and no name may be in both maps
    // (MOESERVE_CHECK: the mapper checks first). get() gives zero-copy views of F32/F16/BF16 tensors
    // and of owned ones and refuses the block-quantized ones (kUnsupported naming tensor, type and
    // file); gguf() gives any of them as blocks (an owned tensor as F32). info() and file_of() have
    // no GGUF answer (kUnsupported).
    static std::unique_ptr<WeightSource> from_gguf(std::shared_ptr<const GgufCheckpoint> gguf,
                                                   std::map<std::string, GgufRef> names,
                                                   std::map<std::string, Tensor> owned = {});

    const std::filesystem::path& dir() const { return dir_; }
    // True when the checkpoint lists `name` (with an index: when the index maps it).
    bool contains(const std::string& name) const {
        return file_of_.count(name) != 0 || owned_.count(name) != 0 || gguf_names_.count(name) != 0;
    }
    // The GGUF blocks of `name`, or nullopt when this source is not a GGUF file. Throws kNotFound
    // for a name the GGUF source does not have, kUnsupported for a type moeserve cannot compute with.
    std::optional<GgufBlocks> gguf(const std::string& name) const;
    bool is_gguf() const { return gguf_ != nullptr; }
    // Every tensor name, sorted.
    std::vector<std::string> names() const;
    size_t num_tensors() const { return file_of_.size() + owned_.size() + gguf_names_.size(); }
    // The name `name` has in its file (differs only in a renamed() source).
    std::string stored_name(const std::string& name) const;
    // "'NAME' in FILE" for messages ("'NAME' (converted in memory from DIR)" for an owned tensor,
    // "'STORED' (read as 'NAME') in FILE" for an alias).
    std::string describe(const std::string& name) const;

    // The tensor's dtype, shape and byte range in its file; throws like get() (and kNotFound for
    // an owned tensor of a renamed() source, which has no file).
    const TensorInfo& info(const std::string& name) const;
    // Zero-copy, read-only view of the tensor. Throws kNotFound naming the tensor and, with an
    // index, the shard that was expected to hold it. Valid while this object (or mappings()) lives.
    TensorView get(const std::string& name) const;
    // As get(), and also checks the dtype and shape; a mismatch throws kInvalidModel with the
    // expected and the actual dtype and shape.
    TensorView get(const std::string& name, DType dtype, const Shape& shape) const;
    // The tensor converted to an owned f32 Tensor of the same shape (any dtype; see convert_to_f32).
    Tensor load_f32(const std::string& name) const;
    // For a tensor the loader has copied into its own form: its pages in the file's mapping stop
    // counting in this process's resident memory (MappedFile::drop_resident; read back from the
    // file if get() is used again). A GGUF name drops its blocks (an expert's slice of a stacked
    // tensor: that slice's whole pages). No effect on owned tensors.
    void drop_resident(const std::string& name) const;

    // The file that holds `name` (throws like info()).
    const SafetensorsFile& file_of(const std::string& name) const;
    // The mappings behind every view; holding them keeps views valid past this object.
    std::vector<std::shared_ptr<const MappedFile>> mappings() const;
    // The checkpoint files, in the order they were opened.
    std::vector<std::filesystem::path> files() const;

private:
    WeightSource() = default;
    void open_index(const std::filesystem::path& index_path);
    void open_single(const std::filesystem::path& file);
    void open_all_in_dir();

    std::filesystem::path dir_;
    std::optional<std::filesystem::path> index_path_;  // set when opened through an index
    std::string source_desc_;                          // what was opened, for messages
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, size_t> file_of_;  // tensor name -> position in files_
    // renamed(): exposed name -> name in its file (absent: the same), and tensors held in memory
    std::map<std::string, std::string> stored_;
    std::map<std::string, Tensor> owned_;
    // from_gguf(): the file and the names it is read under (file_of_ and owned_ stay empty)
    std::shared_ptr<const GgufCheckpoint> gguf_;
    std::map<std::string, GgufRef> gguf_names_;
    const GgufRef& gguf_ref(const std::string& name) const;
    TensorView gguf_view(const std::string& name) const;
};

// Converts every element of `src` to f32 into `dst` (room for src.numel() floats).
// F32 copies; F16, BF16 and F8_E4M3 convert exactly; I8, U8, I32, I64 convert by value
// (I64/I32 round to the nearest f32); BOOL gives 0 or 1. `src` may be unaligned.
void convert_to_f32(const TensorView& src, float* dst);

}  // namespace moeserve::io
