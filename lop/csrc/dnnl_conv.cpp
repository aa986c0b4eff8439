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
#include "dnnl_shim.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace lop_dnnl;

// One input shape with its padding (its key: N, H, W and the four pads).
using Shape = Kept<8>;

constexpr size_t kMaxShapes = 64;

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
  PackedWeights packed;
  int64_t uncached = 0;

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
    Attr attr(post, alpha, beta);
    dnnl_dims_t st = {strides[0], strides[1]}, dil = {dilations[0] - 1, dilations[1] - 1};
    dnnl_dims_t pl = {pads[0], pads[1]}, pr = {pads[2], pads[3]};
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_status_t s = g_api->dnnl_convolution_forward_primitive_desc_create(
        &pd, g_api->engine, dnnl_forward_inference, dnnl_convolution_direct, src.md, wei.md, bias.empty() ? nullptr : b.md, dst.md,
        st, dil, pl, pr, attr.a);
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
    return PackedWeights::pack(plain.md, weight.data(), md);
  }

  // The format slot holding the weight packed as `md` (PackedWeights::keep).
  size_t keep(const_dnnl_memory_desc_t md) {
    Md plain;
    weights_md(plain, false);
    return packed.keep(plain.md, weight.data(), md);
  }

  // Makes `s`'s memory objects for input dims `xd` and output dims `yd` over the weight packed
  // as `wmd` at `wdata` (the source and destination pointers are set at each call).
  void bind(Shape& s, const int64_t* xd, const int64_t* yd, const_dnnl_memory_desc_t wmd, void* wdata) const {
    Md src, dst;
    plain_md(src, 4, xd, dnnl_nhwc);
    plain_md(dst, 4, yd, dnnl_nhwc);
    s.src = Mem(src.md, nullptr);
    s.dst = Mem(dst.md, nullptr);
    s.wei = Mem(wmd, wdata);
    if (!bias.empty()) {
      Md b;
      plain_md(b, 1, &out_ch, dnnl_a);
      s.bias = Mem(b.md, bias.data());
    }
  }

  void run(const int64_t* xd, const float* x, const int64_t* pads, const int64_t* yd, float* y) {
    int64_t key[8] = {xd[0], xd[2], xd[3], pads[0], pads[1], pads[2], pads[3], 0};
    std::lock_guard<std::mutex> guard(lock);
    for (auto& s : shapes) {
      if (std::memcmp(s.key, key, sizeof key) == 0) {
        s.execute(x, y, !bias.empty(), "convolution");
        return;
      }
    }
    Md wmd;
    Shape s;
    s.prim = make(xd, pads, yd, wmd);
    s.format = shapes.size() < kMaxShapes ? keep(wmd.md) : SIZE_MAX;
    if (s.format == SIZE_MAX) {
      // Past the caps: packed for this call alone.
      ++uncached;
      void* data = pack(wmd.md);
      try {
        bind(s, xd, yd, wmd.md, data);
        s.execute(x, y, !bias.empty(), "convolution");
      } catch (...) {
        s = Shape();
        std::free(data);
        throw;
      }
      s = Shape();
      std::free(data);
      return;
    }
    std::memcpy(s.key, key, sizeof key);
    bind(s, xd, yd, packed.formats[s.format].md, packed.formats[s.format].data);
    shapes.push_back(std::move(s));
    shapes.back().execute(x, y, !bias.empty(), "convolution");
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
  *formats = static_cast<int64_t>(c->packed.formats.size());
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
