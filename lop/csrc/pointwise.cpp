// oneDNN's convolution with a prepacked weight, `mkldnn::_convolution_pointwise`, and its
// linear layer, `mkldnn::_linear_pointwise` (the ops PyTorch's own CPU compiler emits), which
// tch does not wrap: found in libtorch's dispatcher at run time and called boxed, so that no C++
// signature has to match libtorch's. Tensors cross as
// tch's handles (`at::Tensor*`, owned by the caller; a result is a new one the caller frees).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

void write_error(const char* what, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, what, err_len - 1);
  err[err_len - 1] = '\0';
}

const c10::OperatorHandle* pointwise_op() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findOp(c10::OperatorName("mkldnn::_convolution_pointwise", ""));
  return op.has_value() ? &*op : nullptr;
}

const c10::OperatorHandle* serialized_md_op() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findOp(c10::OperatorName("mkldnn::_get_mkldnn_serialized_md", ""));
  return op.has_value() ? &*op : nullptr;
}

const c10::OperatorHandle* reorder_linear_op() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findOp(c10::OperatorName("mkldnn::_reorder_linear_weight", ""));
  return op.has_value() ? &*op : nullptr;
}

const c10::OperatorHandle* linear_op() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findOp(c10::OperatorName("mkldnn::_linear_pointwise", ""));
  return op.has_value() ? &*op : nullptr;
}

// Finds `op` (named `name` in messages), runs it on the stack `push` fills, and hands its first
// result over as a new handle. Returns 0, or 1 with a message: the op is missing, or libtorch
// threw (every C++ exception is caught here, none crosses into Rust).
template <typename Push>
int call(const c10::OperatorHandle* op, const char* name, Push push, at::Tensor** out, char* err, size_t err_len) {
  try {
    if (op == nullptr) {
      write_error((std::string(name) + " is not in this libtorch").c_str(), err, err_len);
      return 1;
    }
    torch::jit::Stack stack;
    push(stack);
    op->callBoxed(&stack);
    *out = new at::Tensor(stack.at(0).toTensor());
    return 0;
  } catch (const std::exception& e) {
    write_error(e.what(), err, err_len);
    return 1;
  } catch (...) {
    write_error("unknown C++ exception", err, err_len);
    return 1;
  }
}

// An optional tensor argument: `t`, or None when null.
void push_optional(torch::jit::Stack& stack, const at::Tensor* t) {
  if (t != nullptr) {
    stack.emplace_back(*t);
  } else {
    stack.emplace_back();
  }
}

}  // namespace

extern "C" {

// 1 when this libtorch has both ops (built with oneDNN), 0 otherwise.
int lop_conv_pointwise_available() {
  try {
    return pointwise_op() != nullptr && linear_op() != nullptr ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// y = act(x w^T + b) for `w` of [out, in] (dense); `b` may be null. `attr` names oneDNN's
// post-op as libtorch's fusion map spells it ("none", "relu", "gelu", "sigmoid", "tanh",
// "swish", "hardswish"), with `nscalars` scalars and `algorithm` ("none" or "tanh" for gelu,
// else ""). Returns 0 and sets *out, or 1 with a message.
int lop_linear_pointwise(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b, const char* attr,
                         const double* scalars, int64_t nscalars, const char* algorithm, at::Tensor** out, char* err,
                         size_t err_len) {
  auto push = [&](torch::jit::Stack& stack) {
    stack.emplace_back(*x);
    stack.emplace_back(*w);
    push_optional(stack, b);
    stack.emplace_back(std::string(attr));
    c10::List<std::optional<at::Scalar>> list;
    for (int64_t i = 0; i < nscalars; ++i) {
      list.push_back(at::Scalar(scalars[i]));
    }
    stack.emplace_back(list);
    if (algorithm[0] == '\0') {
      stack.emplace_back();
    } else {
      stack.emplace_back(std::string(algorithm));
    }
  };
  return call(linear_op(), "mkldnn::_linear_pointwise", push, out, err, err_len);
}

// `w` of [out, in] (dense) reordered once into the blocked format oneDNN's linear layer wants,
// for `batch` rows (a hint: the result serves any row count), as a new handle that
// `lop_linear_pointwise` takes as its weight. Returns 0 and sets *out, or 1 with a message.
int lop_reorder_linear_weight(const at::Tensor* w, int64_t batch, at::Tensor** out, char* err, size_t err_len) {
  auto push = [&](torch::jit::Stack& stack) {
    stack.emplace_back(*w);
    stack.emplace_back(batch);
  };
  return call(reorder_linear_op(), "mkldnn::_reorder_linear_weight", push, out, err, err_len);
}

// The memory descriptor of oneDNN tensor `w` (its blocked format, serialized by oneDNN) as a
// new uint8 tensor: two packed weights with equal descriptors hold the same layout. Returns 0
// and sets *out, or 1 with a message (also where this libtorch lacks the op).
int lop_mkldnn_serialized_md(const at::Tensor* w, at::Tensor** out, char* err, size_t err_len) {
  auto push = [&](torch::jit::Stack& stack) { stack.emplace_back(*w); };
  return call(serialized_md_op(), "mkldnn::_get_mkldnn_serialized_md", push, out, err, err_len);
}

// y = conv(x, w, b) with `w` from `mkldnn_reorder_conv2d_weight`; `b` may be null. `nsp`
// entries in each of padding, stride and dilation. Returns 0 and sets *out, or 1 with a message.
int lop_conv_pointwise(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b, const int64_t* padding,
                       const int64_t* stride, const int64_t* dilation, int64_t nsp, int64_t groups, at::Tensor** out,
                       char* err, size_t err_len) {
  auto push = [&](torch::jit::Stack& stack) {
    stack.emplace_back(*x);
    stack.emplace_back(*w);
    push_optional(stack, b);
    stack.emplace_back(std::vector<int64_t>(padding, padding + nsp));
    stack.emplace_back(std::vector<int64_t>(stride, stride + nsp));
    stack.emplace_back(std::vector<int64_t>(dilation, dilation + nsp));
    stack.emplace_back(groups);
    stack.emplace_back(std::string("none"));
    stack.emplace_back(c10::List<std::optional<at::Scalar>>());
    stack.emplace_back();
  };
  return call(pointwise_op(), "mkldnn::_convolution_pointwise", push, out, err, err_len);
}

}  // extern "C"
