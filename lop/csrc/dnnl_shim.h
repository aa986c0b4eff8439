// What the oneDNN shims share (`dnnl_conv.cpp`, `dnnl_linear.cpp`): the C API's functions taken
// from the library `lop_dnnl_load` opens, owning wrappers of descriptors, primitives and memory
// objects, the calling thread's stream, and the C boundary (`guarded`, `write_error`).
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace lop_dnnl {

inline void write_error(const std::string& what, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, what.c_str(), err_len - 1);
  err[err_len - 1] = '\0';
}

#define LOP_DNNL_FUNCTIONS(X)                  \
  X(dnnl_engine_create)                        \
  X(dnnl_stream_create)                        \
  X(dnnl_stream_wait)                          \
  X(dnnl_stream_destroy)                       \
  X(dnnl_memory_desc_create_with_tag)          \
  X(dnnl_memory_desc_clone)                    \
  X(dnnl_memory_desc_destroy)                  \
  X(dnnl_memory_desc_equal)                    \
  X(dnnl_memory_desc_get_size)                 \
  X(dnnl_memory_create)                        \
  X(dnnl_memory_destroy)                       \
  X(dnnl_memory_set_data_handle)               \
  X(dnnl_primitive_attr_create)                \
  X(dnnl_primitive_attr_destroy)               \
  X(dnnl_primitive_attr_set_post_ops)          \
  X(dnnl_post_ops_create)                      \
  X(dnnl_post_ops_destroy)                     \
  X(dnnl_post_ops_append_eltwise)              \
  X(dnnl_convolution_forward_primitive_desc_create) \
  X(dnnl_matmul_primitive_desc_create)         \
  X(dnnl_pooling_forward_primitive_desc_create) \
  X(dnnl_reorder_primitive_desc_create)        \
  X(dnnl_primitive_desc_query_md)              \
  X(dnnl_primitive_desc_destroy)               \
  X(dnnl_primitive_create)                     \
  X(dnnl_primitive_destroy)                    \
  X(dnnl_primitive_execute)

// The C API's functions, taken from the opened library.
struct Api {
#define LOP_DNNL_FIELD(name) decltype(&::name) name = nullptr;
  LOP_DNNL_FUNCTIONS(LOP_DNNL_FIELD)
#undef LOP_DNNL_FIELD
  dnnl_engine_t engine = nullptr;
  int (*omp_get_max_threads)() = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
};

inline Api* g_api = nullptr;
inline std::mutex g_load;

inline const char* status_name(dnnl_status_t s) {
  switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_last_impl_reached: return "no implementation";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    default: return "unknown status";
  }
}

// Throws (caught at the C boundary) with what failed.
struct Failure {
  std::string what;
};
inline void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) throw Failure{std::string(what) + ": " + status_name(s)};
}

// A memory descriptor owned here.
struct Md {
  dnnl_memory_desc_t md = nullptr;
  Md() = default;
  Md(const Md&) = delete;
  Md& operator=(const Md&) = delete;
  ~Md() {
    if (md != nullptr) g_api->dnnl_memory_desc_destroy(md);
  }
};

inline void plain_md(Md& out, int ndims, const int64_t* dims, dnnl_format_tag_t tag) {
  dnnl_dims_t d = {};
  for (int i = 0; i < ndims; ++i) d[i] = dims[i];
  check(g_api->dnnl_memory_desc_create_with_tag(&out.md, ndims, d, dnnl_f32, tag), "memory descriptor");
}

// A primitive (and its descriptor) owned here.
struct Prim {
  dnnl_primitive_t p = nullptr;
  Prim() = default;
  Prim(const Prim&) = delete;
  Prim& operator=(const Prim&) = delete;
  Prim(Prim&& o) noexcept : p(o.p) { o.p = nullptr; }
  Prim& operator=(Prim&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  ~Prim() {
    if (p != nullptr) g_api->dnnl_primitive_destroy(p);
  }
};

// A memory object over a buffer owned elsewhere.
struct Mem {
  dnnl_memory_t m = nullptr;
  Mem() = default;
  Mem(const_dnnl_memory_desc_t md, const void* data) {
    check(g_api->dnnl_memory_create(&m, md, g_api->engine, const_cast<void*>(data)), "memory");
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  Mem(Mem&& o) noexcept : m(o.m) { o.m = nullptr; }
  Mem& operator=(Mem&& o) noexcept {
    std::swap(m, o.m);
    return *this;
  }
  ~Mem() {
    if (m != nullptr) g_api->dnnl_memory_destroy(m);
  }
  // Points the memory object at `data` (same descriptor): no allocation, unlike a new object.
  void point(const void* data) { check(g_api->dnnl_memory_set_data_handle(m, const_cast<void*>(data)), "memory handle"); }
};

// The calling thread's stream, made at its first call and destroyed when the thread ends.
struct ThreadStream {
  dnnl_stream_t s = nullptr;
  ~ThreadStream() {
    if (s != nullptr) g_api->dnnl_stream_destroy(s);
  }
};
inline thread_local ThreadStream t_stream;

inline dnnl_stream_t stream() {
  if (t_stream.s == nullptr) check(g_api->dnnl_stream_create(&t_stream.s, g_api->engine, dnnl_stream_default_flags), "stream");
  return t_stream.s;
}

// Element-wise post-ops by the code the Rust side passes: 0 none, 1 relu (alpha: negative
// slope), 2 swish (alpha: the sigmoid's scale), 3 logistic, 4 clip to [alpha, beta], 5 hard
// sigmoid max(0, min(1, alpha x + beta)), 6 hard swish x times that, 7 exact GELU, 8 GELU's tanh
// approximation, 9 tanh.
constexpr int kMaxPost = 9;

// A primitive's attributes carrying post-op `post` (none for 0), owned here.
struct Attr {
  dnnl_primitive_attr_t a = nullptr;
  Attr(int post, float alpha, float beta) {
    check(g_api->dnnl_primitive_attr_create(&a), "attributes");
    if (post == 0) return;
    if (post < 0 || post > kMaxPost) {
      g_api->dnnl_primitive_attr_destroy(a);
      throw Failure{"unknown post-op"};
    }
    const dnnl_alg_kind_t alg[] = {dnnl_alg_kind_undef,    dnnl_eltwise_relu,      dnnl_eltwise_swish,
                                   dnnl_eltwise_logistic,  dnnl_eltwise_clip_v2,   dnnl_eltwise_hardsigmoid,
                                   dnnl_eltwise_hardswish, dnnl_eltwise_gelu_erf,  dnnl_eltwise_gelu_tanh,
                                   dnnl_eltwise_tanh};
    dnnl_post_ops_t ops = nullptr;
    dnnl_status_t s = g_api->dnnl_post_ops_create(&ops);
    if (s == dnnl_success) s = g_api->dnnl_post_ops_append_eltwise(ops, alg[post], alpha, beta);
    if (s == dnnl_success) s = g_api->dnnl_primitive_attr_set_post_ops(a, ops);
    if (ops != nullptr) g_api->dnnl_post_ops_destroy(ops);
    if (s != dnnl_success) {
      g_api->dnnl_primitive_attr_destroy(a);
      check(s, "eltwise post-op");
    }
  }
  Attr(const Attr&) = delete;
  Attr& operator=(const Attr&) = delete;
  ~Attr() { g_api->dnnl_primitive_attr_destroy(a); }
};

// A primitive kept for one key (an input shape, a row count) with the packed weight it reads
// and the memory objects its calls execute on, made once: a call only points the source and
// destination at its buffers (making and destroying four descriptors and objects per call cost
// about a microsecond each, which a server computing every layer in 8 bands pays 8 times).
template <size_t N>
struct Kept {
  int64_t key[N] = {};
  Prim prim;
  size_t format = SIZE_MAX;
  Mem src, wei, dst, bias;

  // Runs the primitive on `x` into `y`; `bias` was bound when `has_bias` (`what` names the op
  // in an error).
  void execute(const void* x, void* y, bool has_bias, const char* what) {
    src.point(x);
    dst.point(y);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.m}, {DNNL_ARG_WEIGHTS, wei.m}, {DNNL_ARG_DST, dst.m}, {DNNL_ARG_BIAS, bias.m}};
    dnnl_status_t st = g_api->dnnl_primitive_execute(prim.p, stream(), has_bias ? 4 : 3, args);
    if (st == dnnl_success) st = g_api->dnnl_stream_wait(stream());
    check(st, what);
  }
};

// Copies of one weight packed in the blocked layouts oneDNN picked for some shapes: at most
// kMaxFormats, each made once (a reorder from the plain weight) and freed with the owner.
struct PackedWeights {
  static constexpr size_t kMaxFormats = 4;
  struct Format {
    dnnl_memory_desc_t md = nullptr;
    void* data = nullptr;
  };
  std::vector<Format> formats;

  PackedWeights() = default;
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;
  ~PackedWeights() {
    for (auto& f : formats) {
      g_api->dnnl_memory_desc_destroy(f.md);
      std::free(f.data);
    }
  }

  // The weight `data`, laid out as `plain`, packed as `md` into a new buffer (the caller frees
  // it with std::free).
  static void* pack(const_dnnl_memory_desc_t plain, const void* data, const_dnnl_memory_desc_t md) {
    size_t size = g_api->dnnl_memory_desc_get_size(md);
    void* out = std::aligned_alloc(64, (size + 63) / 64 * 64);
    if (out == nullptr) throw Failure{"out of memory packing a weight"};
    try {
      dnnl_primitive_desc_t pd = nullptr;
      check(g_api->dnnl_reorder_primitive_desc_create(&pd, plain, g_api->engine, md, g_api->engine, nullptr), "weight reorder");
      Prim r;
      dnnl_status_t s = g_api->dnnl_primitive_create(&r.p, pd);
      g_api->dnnl_primitive_desc_destroy(pd);
      check(s, "weight reorder primitive");
      Mem from(plain, data), to(md, out);
      dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from.m}, {DNNL_ARG_TO, to.m}};
      check(g_api->dnnl_primitive_execute(r.p, stream(), 2, args), "weight reorder");
      check(g_api->dnnl_stream_wait(stream()), "weight reorder");
    } catch (...) {
      std::free(out);
      throw;
    }
    return out;
  }

  // The slot holding the weight packed as `md`: an equal one kept, or a new one while fewer
  // than kMaxFormats are kept; SIZE_MAX past that.
  size_t keep(const_dnnl_memory_desc_t plain, const void* data, const_dnnl_memory_desc_t md) {
    for (size_t i = 0; i < formats.size(); ++i) {
      if (g_api->dnnl_memory_desc_equal(formats[i].md, md) != 0) return i;
    }
    if (formats.size() >= kMaxFormats) return SIZE_MAX;
    Format f;
    check(g_api->dnnl_memory_desc_clone(&f.md, md), "weight descriptor");
    try {
      f.data = pack(plain, data, md);
    } catch (...) {
      g_api->dnnl_memory_desc_destroy(f.md);
      throw;
    }
    formats.push_back(f);
    return formats.size() - 1;
  }
};

// Runs `body` at the C boundary: 0, or 1 with the message of whatever it threw.
template <typename Body>
int guarded(Body body, char* err, size_t err_len) {
  try {
    body();
    return 0;
  } catch (const Failure& f) {
    write_error(f.what, err, err_len);
  } catch (const std::exception& e) {
    write_error(e.what(), err, err_len);
  } catch (...) {
    write_error("unknown C++ exception", err, err_len);
  }
  return 1;
}

// Sets oneDNN's OpenMP thread count to `threads` where it differs (0: leave it).
inline void use_threads(int threads) {
  if (threads > 0 && g_api->omp_get_max_threads != nullptr && g_api->omp_set_num_threads != nullptr &&
      g_api->omp_get_max_threads() != threads) {
    g_api->omp_set_num_threads(threads);
  }
}

}  // namespace lop_dnnl
