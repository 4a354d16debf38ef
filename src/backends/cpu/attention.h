// Template-tier CPU causal attention: scores, mask, softmax and P·V in one pass per block of queries.
#pragma once

#include <cstdint>

namespace prism {

struct AttentionDims {
  int64_t heads_kv, group, head_dim;
  int64_t seq, total;  // queries this step; keys visible to the last one (cached + new)
  int64_t offset;      // key t is visible to query s when t < s + offset
  float scale, exp_scale;
};

// True where this CPU runs the template (AVX-512, unless PRISM_GEMM_ISA rules it out).
bool AttentionTemplateSupported();

// out[h, g, s, d] = sum_t p[t] v[t, h, d], p = softmax over visible t of scale * q[s, h*G+g, :] · k[t, h, :]
// (the softmax as exp2((x - max) * exp_scale), normalized). q: [seq, H*G*D]; k, v: [>= total, H, D];
// out: [H, G, seq, D]; all f32 row-major. A query that sees no key gets NaN, as the unfused graph does.
// Work comes in blocks of 16 (query, group head) rows per K/V head; thread t of n takes blocks t,
// t + n, ..., which balances the causal triangle.
void CausalAttentionF32(const float* q, const float* k, const float* v, float* out, const AttentionDims& a,
                        int thread, int threads);

}  // namespace prism
