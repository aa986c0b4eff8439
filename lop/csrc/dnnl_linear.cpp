// A float linear layer y = act(x · wᵀ + b) run straight on oneDNN's matmul primitive, with the
// primitive, its memory objects and the packed weight kept per row count. libtorch's route to
// oneDNN's linear layer (`mkldnn::_linear_pointwise`) spends about 18 us of set-up on every
// call, and a server computing a ConvNeXt's 36 linear layers in 8 bands pays it 8 times; here a
// call costs about 2 us beyond its kernel.
//
// The library is the one `dnnl_conv.cpp` opens (`lop_dnnl_load`); shared pieces are in
// `dnnl_shim.h`. Every call catches what could throw and reports by status.
#include "dnnl_shim.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace {

using namespace lop_dnnl;

// One row count and post-op (its key: rows, post-op, and its two parameters' bits).
using Entry = Kept<4>;

constexpr size_t kMaxEntries = 64;

// A linear layer's constants and what it keeps per row count.
struct Linear {
  std::vector<float> weight;  // [N, K], row-major
  std::vector<float> bias;    // [N] or empty
  int64_t n = 0, k = 0;
  std::mutex lock;
  std::vector<Entry> entries;
  PackedWeights packed;
  int64_t uncached = 0;

  // The plain weight as oneDNN's [K, N] operand: the [N, K] rows read transposed.
  void plain_weight(Md& out) const {
    int64_t d[2] = {k, n};
    plain_md(out, 2, d, dnnl_ba);
  }

  void io_mds(int64_t m, Md& src, Md& dst, Md& b) const {
    int64_t sd[2] = {m, k}, dd[2] = {m, n}, bd[2] = {1, n};
    plain_md(src, 2, sd, dnnl_ab);
    plain_md(dst, 2, dd, dnnl_ab);
    if (!bias.empty()) plain_md(b, 2, bd, dnnl_ab);
  }

  // The primitive for `m` rows with post-op `post`; `weights_out` gets the packing it reads.
  Prim make(int64_t m, int post, float alpha, float beta, Md& weights_out) const {
    Md src, dst, b, wei;
    io_mds(m, src, dst, b);
    int64_t wd[2] = {k, n};
    plain_md(wei, 2, wd, dnnl_format_tag_any);
    Attr attr(post, alpha, beta);
    dnnl_primitive_desc_t pd = nullptr;
    check(g_api->dnnl_matmul_primitive_desc_create(&pd, g_api->engine, src.md, wei.md, bias.empty() ? nullptr : b.md, dst.md,
                                                   attr.a),
          "matmul descriptor");
    Prim prim;
    dnnl_status_t s = g_api->dnnl_primitive_create(&prim.p, pd);
    if (s == dnnl_success) s = g_api->dnnl_memory_desc_clone(&weights_out.md, g_api->dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    g_api->dnnl_primitive_desc_destroy(pd);
    check(s, "matmul primitive");
    return prim;
  }

  // Makes `e`'s memory objects for `m` rows over the packed weight `wmd` at `wdata`.
  void bind(Entry& e, int64_t m, const_dnnl_memory_desc_t wmd, void* wdata) const {
    Md src, dst, b;
    io_mds(m, src, dst, b);
    e.src = Mem(src.md, nullptr);
    e.dst = Mem(dst.md, nullptr);
    e.wei = Mem(wmd, wdata);
    if (!bias.empty()) e.bias = Mem(b.md, bias.data());
  }

  void run(int64_t m, const float* x, float* y, int post, float alpha, float beta) {
    int64_t key[4] = {m, post, 0, 0};
    std::memcpy(&key[2], &alpha, sizeof alpha);
    std::memcpy(&key[3], &beta, sizeof beta);
    std::lock_guard<std::mutex> guard(lock);
    for (auto& e : entries) {
      if (std::memcmp(e.key, key, sizeof key) == 0) {
        e.execute(x, y, !bias.empty(), "matmul");
        return;
      }
    }
    Md wmd, plain;
    plain_weight(plain);
    Entry e;
    e.prim = make(m, post, alpha, beta, wmd);
    e.format = entries.size() < kMaxEntries ? packed.keep(plain.md, weight.data(), wmd.md) : SIZE_MAX;
    if (e.format == SIZE_MAX) {
      // Past the caps: packed for this call alone.
      ++uncached;
      void* data = PackedWeights::pack(plain.md, weight.data(), wmd.md);
      try {
        bind(e, m, wmd.md, data);
        e.execute(x, y, !bias.empty(), "matmul");
      } catch (...) {
        e = Entry();
        std::free(data);
        throw;
      }
      e = Entry();
      std::free(data);
      return;
    }
    std::memcpy(e.key, key, sizeof key);
    bind(e, m, packed.formats[e.format].md, packed.formats[e.format].data);
    entries.push_back(std::move(e));
    entries.back().execute(x, y, !bias.empty(), "matmul");
  }
};

}  // namespace

extern "C" {

// A linear layer of weight `w` ([n, k] floats, row-major; copied) and optional `bias` ([n];
// copied). Null with a message when oneDNN is not loaded.
void* lop_dnnl_linear_new(const float* w, int64_t n, int64_t k, const float* bias, char* err, size_t err_len) {
  if (g_api == nullptr) {
    write_error("oneDNN is not loaded", err, err_len);
    return nullptr;
  }
  if (n <= 0 || k <= 0) {
    write_error("a linear layer needs a non-empty weight", err, err_len);
    return nullptr;
  }
  try {
    auto* l = new Linear();
    l->n = n;
    l->k = k;
    l->weight.assign(w, w + n * k);
    if (bias != nullptr) l->bias.assign(bias, bias + n);
    return l;
  } catch (const std::exception& e) {
    write_error(e.what(), err, err_len);
    return nullptr;
  }
}

// y = act(x · wᵀ + b) for `x` [m, k] and `y` [m, n], dense row-major floats, with post-op
// `post` (dnnl_shim.h's codes) and its parameters, on `threads` OpenMP threads. Returns 0, or 1
// with a message.
int lop_dnnl_linear_run(void* ctx, const float* x, int64_t m, float* y, int post, float alpha, float beta, int threads, char* err,
                        size_t err_len) {
  return guarded(
      [&] {
        if (m <= 0) throw Failure{"a linear layer's input has no rows"};
        use_threads(threads);
        static_cast<Linear*>(ctx)->run(m, x, y, post, alpha, beta);
      },
      err, err_len);
}

// Row counts kept, packed formats kept, and calls past the caps.
void lop_dnnl_linear_stats(void* ctx, int64_t* entries, int64_t* formats, int64_t* uncached) {
  auto* l = static_cast<Linear*>(ctx);
  std::lock_guard<std::mutex> guard(l->lock);
  *entries = static_cast<int64_t>(l->entries.size());
  *formats = static_cast<int64_t>(l->packed.formats.size());
  *uncached = l->uncached;
}

void lop_dnnl_linear_free(void* ctx) { delete static_cast<Linear*>(ctx); }

}  // extern "C"
