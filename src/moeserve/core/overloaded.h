// A visitor from lambdas, one per alternative: std::visit(Overloaded{[](const A&) {...}, ...}, v).
#pragma once

namespace moeserve {

template <class... F>
struct Overloaded : F... {
    using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace moeserve
