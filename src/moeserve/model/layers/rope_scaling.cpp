#include "moeserve/model/layers/rope_scaling.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

RopeScaling RopeScaling::parse(const io::HfConfig& config, double default_theta) {
    RopeScaling r;
    r.rope_theta = config.get_float("rope_theta", default_theta);
    auto scaling = config.get_object("rope_scaling");
    if (!scaling) scaling = config.get_object("rope_parameters");
    if (!scaling) return r;
    // HF accepts both "rope_type" and the older "type".
    r.rope_type = scaling->get_string("rope_type", scaling->get_string("type", "default"));
    r.rope_theta = scaling->get_float("rope_theta", r.rope_theta);
    if (r.rope_type == "default") return r;
    if (r.rope_type != "linear" && r.rope_type != "yarn") {
        raise(ErrorCode::kUnsupported, "{}: rope_scaling type '{}' is not supported (supported: default, linear, yarn)",
              config.label(), r.rope_type);
    }
    r.factor = scaling->get_float("factor");
    if (r.factor < 1.0) scaling->fail("factor", "a number >= 1");
    if (r.rope_type == "yarn") {
        r.original_max_position_embeddings = scaling->get_int("original_max_position_embeddings", 0);
        r.beta_fast = scaling->get_float("beta_fast", 32.0);
        r.beta_slow = scaling->get_float("beta_slow", 1.0);
        r.mscale = scaling->get_float("mscale", 1.0);
        r.mscale_all_dim = scaling->get_float("mscale_all_dim", 0.0);
        r.attention_factor = scaling->get_float("attention_factor", 0.0);
        r.truncate = scaling->get_bool("truncate", true);
    }
    return r;
}

}  // namespace moeserve::model
