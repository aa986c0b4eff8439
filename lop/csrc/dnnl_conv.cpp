// A 2-d float convolution run straight on oneDNN's C API, with its primitive and packed weight
// kept per input shape: libtorch's own route to the same kernel (`mkldnn::_convolution_pointwise`)
// spends about 25 us of set-up on every call, which a server computing each layer in 8 bands pays
// 8 times (a whole yolo_det has 63 convolutions). Here a call costs about 1 us beyond the kernel.
//
// oneDNN is not linked: `lop_dnnl_load` opens the shared library a pinned wheel installs
// (onednn-cpu-gomp, built on GNU OpenMP like the torch wheel, so both share one OpenMP runtime:
// the `libgomp.so.1` libtorch loaded) and takes its functions by name; without it the engine keeps
// libtorch's route. Only the C API's declarations come from the wheel's headers (`decltype`).
// Every call catches what could throw and reports by status, never across into Rust.
//
// Max pooling runs here too: libtorch's channels-last max pooling computes indices it does not
// need and cannot pad a band asymmetrically, so the engine padded with copies first; on this CPU
// that made yolo_det's and YOLOX's SPP pools 4-6x onnxruntime's (docs/benchmarks.md).
#include <oneapi/dnnl/dnnl.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

void write_error(const std::string& what, char* err, size_t err_len) {
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

Api* g_api = nullptr;
std::mutex g_load;

const char* status_name(dnnl_status_t s) {
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
void check(dnnl_status_t s, const char* what) {
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

void plain_md(Md& out, int ndims, const int64_t* dims, dnnl_format_tag_t tag) {
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

// One packed copy of the weight, in the blocked layout oneDNN picked for some shapes.
struct Format {
  dnnl_memory_desc_t md = nullptr;
  void* data = nullptr;
};

// One input shape with its padding: its primitive, the format its weight is packed in, and the
// memory objects its calls execute on (made once: a call only points the source and destination
// at its buffers; making and destroying four descriptors and objects per call cost about a
// microsecond each, which a server computing every layer in 8 bands pays 8 times).
struct Shape {
  int64_t key[8];
  Prim prim;
  size_t format;
  Mem src, wei, dst, bias;
};

constexpr size_t kMaxShapes = 64;
constexpr size_t kMaxFormats = 4;

// The calling thread's stream, made at its first call and destroyed when the thread ends.
struct ThreadStream {
  dnnl_stream_t s = nullptr;
  ~ThreadStream() {
    if (s != nullptr) g_api->dnnl_stream_destroy(s);
  }
};
thread_local ThreadStream t_stream;

dnnl_stream_t stream() {
  if (t_stream.s == nullptr) check(g_api->dnnl_stream_create(&t_stream.s, g_api->engine, dnnl_stream_default_flags), "stream");
  return t_stream.s;
}

// A convolution's constants and what it keeps per shape.
struct Conv {
  std::vector<float> weight;  // [O, I/g, kh, kw]
  std::vector<float> bias;    // [O] or empty
  int64_t out_ch, in_per_group, kh, kw, groups;
  int64_t strides[2], dilations[2];
  int post;  // 0 none, 1 relu (alpha: negative slope), 2 swish (alpha), 3 logistic, 4 clip [alpha, beta],
             // 5 hard sigmoid max(0, min(1, alpha x + beta)), 6 hard swish x * that
  float alpha, beta;
  std::mutex lock;
  std::vector<Shape> shapes;
  std::vector<Format> formats;
  int64_t uncached = 0;

  ~Conv() {
    for (auto& f : formats) {
      g_api->dnnl_memory_desc_destroy(f.md);
      std::free(f.data);
    }
  }

  void weights_md(Md& out, bool any) const {
    if (groups == 1) {
      int64_t d[4] = {out_ch, in_per_group, kh, kw};
      plain_md(out, 4, d, any ? dnnl_format_tag_any : dnnl_oihw);
    } else {
      int64_t d[5] = {groups, out_ch / groups, in_per_group, kh, kw};
      plain_md(out, 5, d, any ? dnnl_format_tag_any : dnnl_goihw);
    }
  }

  // The primitive for input `x` [N,C,H,W] with pads (top, left, bottom, right), into `y`.
  Prim make(const int64_t* x, const int64_t* pads, const int64_t* y, Md& weights_out) const {
    Md src, wei, dst, b;
    plain_md(src, 4, x, dnnl_nhwc);
    plain_md(dst, 4, y, dnnl_nhwc);
    weights_md(wei, true);
    if (!bias.empty()) plain_md(b, 1, &out_ch, dnnl_a);
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_post_ops_t ops = nullptr;
    check(g_api->dnnl_primitive_attr_create(&attr), "attributes");
    if (post != 0) {
      check(g_api->dnnl_post_ops_create(&ops), "post-ops");
      const dnnl_alg_kind_t alg[] = {dnnl_alg_kind_undef, dnnl_eltwise_relu, dnnl_eltwise_swish, dnnl_eltwise_logistic,
                                     dnnl_eltwise_clip_v2, dnnl_eltwise_hardsigmoid, dnnl_eltwise_hardswish};
      check(g_api->dnnl_post_ops_append_eltwise(ops, alg[post], alpha, beta), "eltwise post-op");
      check(g_api->dnnl_primitive_attr_set_post_ops(attr, ops), "set post-ops");
    }
    dnnl_dims_t st = {strides[0], strides[1]}, dil = {dilations[0] - 1, dilations[1] - 1};
    dnnl_dims_t pl = {pads[0], pads[1]}, pr = {pads[2], pads[3]};
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_status_t s = g_api->dnnl_convolution_forward_primitive_desc_create(
        &pd, g_api->engine, dnnl_forward_inference, dnnl_convolution_direct, src.md, wei.md, bias.empty() ? nullptr : b.md, dst.md,
        st, dil, pl, pr, attr);
    if (ops != nullptr) g_api->dnnl_post_ops_destroy(ops);
    g_api->dnnl_primitive_attr_destroy(attr);
    check(s, "convolution descriptor");
    Prim prim;
    s = g_api->dnnl_primitive_create(&prim.p, pd);
    if (s == dnnl_success) s = g_api->dnnl_memory_desc_clone(&weights_out.md, g_api->dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    g_api->dnnl_primitive_desc_destroy(pd);
    check(s, "convolution primitive");
    return prim;
  }

  // The weight packed as `md`, into a new buffer (the caller frees it with std::free).
  void* pack(const_dnnl_memory_desc_t md) const {
    Md plain;
    weights_md(plain, false);
    size_t size = g_api->dnnl_memory_desc_get_size(md);
    void* data = std::aligned_alloc(64, (size + 63) / 64 * 64);
    if (data == nullptr) throw Failure{"out of memory packing a weight"};
    try {
      dnnl_primitive_desc_t pd = nullptr;
      check(g_api->dnnl_reorder_primitive_desc_create(&pd, plain.md, g_api->engine, md, g_api->engine, nullptr), "weight reorder");
      Prim r;
      dnnl_status_t s = g_api->dnnl_primitive_create(&r.p, pd);
      g_api->dnnl_primitive_desc_destroy(pd);
      check(s, "weight reorder primitive");
      Mem from(plain.md, weight.data()), to(md, data);
      dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from.m}, {DNNL_ARG_TO, to.m}};
      check(g_api->dnnl_primitive_execute(r.p, stream(), 2, args), "weight reorder");
      check(g_api->dnnl_stream_wait(stream()), "weight reorder");
    } catch (...) {
      std::free(data);
      throw;
    }
    return data;
  }

  // The format slot holding the weight packed as `md`: an equal one kept, or a new one while
  // fewer than kMaxFormats are kept; SIZE_MAX past that.
  size_t keep(const_dnnl_memory_desc_t md) {
    for (size_t i = 0; i < formats.size(); ++i) {
      if (g_api->dnnl_memory_desc_equal(formats[i].md, md) != 0) return i;
    }
    if (formats.size() >= kMaxFormats) return SIZE_MAX;
    Format f;
    check(g_api->dnnl_memory_desc_clone(&f.md, md), "weight descriptor");
    try {
      f.data = pack(md);
    } catch (...) {
      g_api->dnnl_memory_desc_destroy(f.md);
      throw;
    }
    formats.push_back(f);
    return formats.size() - 1;
  }

  void execute(const Prim& prim, const_dnnl_memory_desc_t wmd, const void* wdata, const int64_t* xd, const float* x,
               const int64_t* yd, float* y) const {
    Md src, dst, b;
    plain_md(src, 4, xd, dnnl_nhwc);
    plain_md(dst, 4, yd, dnnl_nhwc);
    Mem ms(src.md, x), mw(wmd, wdata), md(dst.md, y);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms.m}, {DNNL_ARG_WEIGHTS, mw.m}, {DNNL_ARG_DST, md.m}, {DNNL_ARG_BIAS, nullptr}};
    int nargs = 3;
    Mem* mb = nullptr;
    if (!bias.empty()) {
      plain_md(b, 1, &out_ch, dnnl_a);
      mb = new Mem(b.md, bias.data());
      args[3].memory = mb->m;
      nargs = 4;
    }
    dnnl_status_t s = g_api->dnnl_primitive_execute(prim.p, stream(), nargs, args);
    if (s == dnnl_success) s = g_api->dnnl_stream_wait(stream());
    delete mb;
    check(s, "convolution");
  }

  // Makes `s`'s memory objects for input dims `xd` and output dims `yd` (the data pointers are
  // set at each call).
  void bind(Shape& s, const int64_t* xd, const int64_t* yd) const {
    Md src, dst;
    plain_md(src, 4, xd, dnnl_nhwc);
    plain_md(dst, 4, yd, dnnl_nhwc);
    s.src = Mem(src.md, nullptr);
    s.dst = Mem(dst.md, nullptr);
    s.wei = Mem(formats[s.format].md, formats[s.format].data);
    if (!bias.empty()) {
      Md b;
      plain_md(b, 1, &out_ch, dnnl_a);
      s.bias = Mem(b.md, bias.data());
    }
  }

  // Runs `s`'s primitive on `x` into `y`, on its kept memory objects.
  void execute(Shape& s, const float* x, float* y) const {
    s.src.point(x);
    s.dst.point(y);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s.src.m}, {DNNL_ARG_WEIGHTS, s.wei.m}, {DNNL_ARG_DST, s.dst.m}, {DNNL_ARG_BIAS, s.bias.m}};
    dnnl_status_t st = g_api->dnnl_primitive_execute(s.prim.p, stream(), bias.empty() ? 3 : 4, args);
    if (st == dnnl_success) st = g_api->dnnl_stream_wait(stream());
    check(st, "convolution");
  }

  void run(const int64_t* xd, const float* x, const int64_t* pads, const int64_t* yd, float* y) {
    int64_t key[8] = {xd[0], xd[2], xd[3], pads[0], pads[1], pads[2], pads[3], 0};
    std::lock_guard<std::mutex> guard(lock);
    for (auto& s : shapes) {
      if (std::memcmp(s.key, key, sizeof key) == 0) {
        execute(s, x, y);
        return;
      }
    }
    Md wmd;
    Prim prim = make(xd, pads, yd, wmd);
    size_t format = shapes.size() < kMaxShapes ? keep(wmd.md) : SIZE_MAX;
    if (format == SIZE_MAX) {
      // Past the caps: packed for this call alone.
      ++uncached;
      void* data = pack(wmd.md);
      try {
        execute(prim, wmd.md, data, xd, x, yd, y);
      } catch (...) {
        std::free(data);
        throw;
      }
      std::free(data);
      return;
    }
    Shape s;
    std::memcpy(s.key, key, sizeof key);
    s.prim = std::move(prim);
    s.format = format;
    bind(s, xd, yd);
    shapes.push_back(std::move(s));
    execute(shapes.back(), x, y);
  }
};

// Max pooling's primitives, one per shape and parameters (everything a primitive depends on is
// its key), shared by every pooling op. Entries are never removed, so a handle taken under the
// lock stays valid while it runs outside it; past kMaxPools a primitive is made for one call.
struct PoolEntry {
  int64_t key[16];
  Prim prim;
};
constexpr size_t kMaxPools = 256;
std::mutex g_pool_lock;
// Never freed: destroying primitives at exit could run after oneDNN's own teardown.
std::vector<PoolEntry>* g_pools = new std::vector<PoolEntry>();

// The max-pooling primitive for `x` [N,C,H,W] into `y` [N,C,OH,OW], both dense NHWC, with
// `kernel`, `strides` and `dilations` (2 each, dilation 1 = none) and `pads` (top, left, bottom,
// right). Padding takes no part in a window's maximum.
Prim make_max_pool(const int64_t* xd, const int64_t* yd, const int64_t* kernel, const int64_t* strides,
                   const int64_t* dilations, const int64_t* pads) {
  Md src, dst;
  plain_md(src, 4, xd, dnnl_nhwc);
  plain_md(dst, 4, yd, dnnl_nhwc);
  dnnl_dims_t st = {strides[0], strides[1]}, ker = {kernel[0], kernel[1]}, dil = {dilations[0] - 1, dilations[1] - 1};
  dnnl_dims_t pl = {pads[0], pads[1]}, pr = {pads[2], pads[3]};
  dnnl_primitive_desc_t pd = nullptr;
  check(g_api->dnnl_pooling_forward_primitive_desc_create(&pd, g_api->engine, dnnl_forward_inference, dnnl_pooling_max, src.md,
                                                          dst.md, st, ker, dil, pl, pr, nullptr),
        "pooling descriptor");
  Prim prim;
  dnnl_status_t s = g_api->dnnl_primitive_create(&prim.p, pd);
  g_api->dnnl_primitive_desc_destroy(pd);
  check(s, "pooling primitive");
  return prim;
}

void max_pool(const int64_t* xd, const float* x, const int64_t* yd, float* y, const int64_t* kernel, const int64_t* strides,
              const int64_t* dilations, const int64_t* pads) {
  int64_t key[16] = {xd[0],      xd[1],      xd[2],        xd[3],        yd[2],   yd[3],   kernel[0], kernel[1],
                     strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1], pads[2],   pads[3]};
  dnnl_primitive_t p = nullptr;
  Prim own;
  {
    std::lock_guard<std::mutex> guard(g_pool_lock);
    for (auto& e : *g_pools) {
      if (std::memcmp(e.key, key, sizeof key) == 0) {
        p = e.prim.p;
        break;
      }
    }
    if (p == nullptr && g_pools->size() < kMaxPools) {
      PoolEntry e;
      std::memcpy(e.key, key, sizeof key);
      e.prim = make_max_pool(xd, yd, kernel, strides, dilations, pads);
      g_pools->push_back(std::move(e));
      p = g_pools->back().prim.p;
    }
  }
  if (p == nullptr) {
    own = make_max_pool(xd, yd, kernel, strides, dilations, pads);
    p = own.p;
  }
  Md src, dst;
  plain_md(src, 4, xd, dnnl_nhwc);
  plain_md(dst, 4, yd, dnnl_nhwc);
  Mem ms(src.md, x), md(dst.md, y);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ms.m}, {DNNL_ARG_DST, md.m}};
  dnnl_status_t s = g_api->dnnl_primitive_execute(p, stream(), 2, args);
  if (s == dnnl_success) s = g_api->dnnl_stream_wait(stream());
  check(s, "max pooling");
}

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
void use_threads(int threads) {
  if (threads > 0 && g_api->omp_get_max_threads != nullptr && g_api->omp_set_num_threads != nullptr &&
      g_api->omp_get_max_threads() != threads) {
    g_api->omp_set_num_threads(threads);
  }
}

}  // namespace

extern "C" {

// Opens oneDNN at `path` (a libdnnl.so.3) and takes the functions used here. Returns 0, or 1 with
// a message; a second call after success does nothing.
int lop_dnnl_load(const char* path, char* err, size_t err_len) {
  std::lock_guard<std::mutex> guard(g_load);
  if (g_api != nullptr) return 0;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    write_error(std::string("cannot open ") + path + ": " + (why != nullptr ? why : "unknown"), err, err_len);
    return 1;
  }
  auto* api = new Api();
#define LOP_DNNL_TAKE(name)                                                            \
  api->name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                \
  if (api->name == nullptr) {                                                         \
    write_error(std::string(path) + " lacks " #name " (oneDNN 3.x expected)", err, err_len); \
    delete api;                                                                       \
    dlclose(lib);                                                                     \
    return 1;                                                                         \
  }
  LOP_DNNL_FUNCTIONS(LOP_DNNL_TAKE)
#undef LOP_DNNL_TAKE
  api->omp_get_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  api->omp_set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  dnnl_status_t s = api->dnnl_engine_create(&api->engine, dnnl_cpu, 0);
  if (s != dnnl_success) {
    write_error(std::string("oneDNN's CPU engine: ") + status_name(s), err, err_len);
    delete api;
    dlclose(lib);
    return 1;
  }
  g_api = api;
  return 0;
}

// A convolution of weight `w` ([O, I/groups, kh, kw], float, contiguous; copied), optional `bias`
// ([O]), `strides` and `dilations` (2 each), and a fused activation `post` with its parameters
// (0 none; 1 relu, `alpha` the negative slope; 2 swish, `alpha` the sigmoid's scale; 3 logistic;
// 4 clip to [`alpha`, `beta`]; 5 hard sigmoid and 6 hard swish, slope `alpha`, offset `beta`).
// Null with a message on failure (oneDNN not loaded, unknown `post`).
void* lop_dnnl_conv_new(const float* w, const int64_t* wdims, int64_t groups, const float* bias, const int64_t* strides,
                        const int64_t* dilations, int post, float alpha, float beta, char* err, size_t err_len) {
  if (g_api == nullptr) {
    write_error("oneDNN is not loaded", err, err_len);
    return nullptr;
  }
  if (post < 0 || post > 6) {
    write_error("unknown post-op", err, err_len);
    return nullptr;
  }
  try {
    auto* c = new Conv();
    c->out_ch = wdims[0];
    c->in_per_group = wdims[1];
    c->kh = wdims[2];
    c->kw = wdims[3];
    c->groups = groups;
    c->strides[0] = strides[0];
    c->strides[1] = strides[1];
    c->dilations[0] = dilations[0];
    c->dilations[1] = dilations[1];
    c->post = post;
    c->alpha = alpha;
    c->beta = beta;
    c->weight.assign(w, w + wdims[0] * wdims[1] * wdims[2] * wdims[3]);
    if (bias != nullptr) c->bias.assign(bias, bias + wdims[0]);
    return c;
  } catch (const std::exception& e) {
    write_error(e.what(), err, err_len);
    return nullptr;
  }
}

// y = conv(x) for `x` [N,C,H,W] dense channels-last (NHWC memory) with `pads` (top, left,
// bottom, right), into `y` [N,O,OH,OW], dense channels-last, on `threads` OpenMP threads. Returns
// 0, or 1 with a message.
int lop_dnnl_conv_run(void* ctx, const float* x, const int64_t* xdims, const int64_t* pads, float* y, const int64_t* ydims,
                      int threads, char* err, size_t err_len) {
  return guarded(
      [&] {
        use_threads(threads);
        static_cast<Conv*>(ctx)->run(xdims, x, pads, ydims, y);
      },
      err, err_len);
}

// Shapes kept, packed formats kept, and calls past the caps (packed for that call alone).
void lop_dnnl_conv_stats(void* ctx, int64_t* shapes, int64_t* formats, int64_t* uncached) {
  auto* c = static_cast<Conv*>(ctx);
  std::lock_guard<std::mutex> guard(c->lock);
  *shapes = static_cast<int64_t>(c->shapes.size());
  *formats = static_cast<int64_t>(c->formats.size());
  *uncached = c->uncached;
}

void lop_dnnl_conv_free(void* ctx) { delete static_cast<Conv*>(ctx); }

// y = max_pool(x) for `x` [N,C,H,W] and `y` [N,C,OH,OW], both dense channels-last (NHWC memory),
// with `kernel`, `strides`, `dilations` (2 each) and `pads` (top, left, bottom, right; padding
// takes no part in a maximum), on `threads` OpenMP threads. Returns 0, or 1 with a message
// (oneDNN not loaded, inconsistent sizes).
int lop_dnnl_max_pool(const float* x, const int64_t* xdims, float* y, const int64_t* ydims, const int64_t* kernel,
                      const int64_t* strides, const int64_t* dilations, const int64_t* pads, int threads, char* err,
                      size_t err_len) {
  if (g_api == nullptr) {
    write_error("oneDNN is not loaded", err, err_len);
    return 1;
  }
  return guarded(
      [&] {
        use_threads(threads);
        max_pool(xdims, x, ydims, y, kernel, strides, dilations, pads);
      },
      err, err_len);
}

}  // extern "C"
