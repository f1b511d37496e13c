"""The GEMM tile-model hot loop: one numba kernel over every (shape, candidate, split-K) triple.

Plain arrays and scalars in, arrays out, so it compiles once, caches to NUMBA_CACHE_DIR and
prices >= 100k shapes/s on one core. The equations are documented in docs/operator-model.md; the
plain-Python reference in tests/test_gemm_kernel.py restates them independently.
"""
from __future__ import annotations

import math

import numpy as np

from rapidllm.jit import njit

# Layout of the float64 parameter vector handed to the kernel.
P_SMS, P_SM_PEAK, P_SMEM_BW, P_L2_BW, P_L2_SIZE, P_HBM_BW, P_LAUNCH, P_LAT, P_IN, P_OUT, P_ACC, P_SRC = range(12)
N_PARAMS = 12
# Columns of the float output.
F_TIME, F_COMPUTE, F_SMEM, F_L2, F_HBM, F_HBM_BYTES, F_L2_BYTES, F_FLOPS, F_WAVES, F_SM_TIME = range(10)
N_FOUT = 10
# Columns of the integer output.
I_CAND, I_SPLIT, I_OCC, I_BOUND = range(4)
N_IOUT = 4
BOUND_NAMES = ("compute", "shared_memory", "latency", "l2", "hbm")


@njit(cache=True)
def _round_time(conc, kit, fl_it, sm_it, peak, smem_bw, lat, stages, epi_s):
    """One round of `conc` co-resident CTAs on an SM: pipeline fill, k-loop, then the C-tile epilogue.

    epi_s is one CTA's C-tile store at its share of L2 bandwidth: the store follows the CTA's own
    k-loop, so on short-K GEMMs it adds to the round instead of hiding under the math.
    """
    per_it = max(conc * fl_it / peak, conc * sm_it / smem_bw, lat / (stages - 1))
    return 2.0 * lat + kit * per_it + conc * epi_s


@njit(cache=True, work=lambda batch, m, n, k, cta_m, *rest: batch.size * cta_m.size * 8)
def price_kernel(batch, m, n, k, cta_m, cta_n, cta_k, smem_rows, stages, cluster_m, occ, splits, p):
    """Best candidate per shape. Returns (float64[S, N_FOUT], int64[S, N_IOUT])."""
    S = m.shape[0]
    C = cta_m.shape[0]
    fout = np.zeros((S, N_FOUT))
    iout = np.zeros((S, N_IOUT), dtype=np.int64)
    sms = p[P_SMS]
    peak, smem_bw, l2_bw, l2_size = p[P_SM_PEAK], p[P_SMEM_BW], p[P_L2_BW], p[P_L2_SIZE]
    hbm_bw, launch, lat = p[P_HBM_BW], p[P_LAUNCH], p[P_LAT]
    in_b, out_b, acc_b, src_b = p[P_IN], p[P_OUT], p[P_ACC], p[P_SRC]
    n_sms = np.int64(sms)
    for s in range(S):
        B, M, N, K = batch[s], m[s], n[s], k[s]
        mnb = float(B) * M * N
        comp_in = float(B) * (M * K + K * N) * in_b
        foot = float(M * K + K * N) * in_b
        spill = 0.0 if foot <= l2_size else 1.0 - l2_size / foot
        best = np.inf
        for c in range(C):
            cm, cn, ck, st, o, cl = cta_m[c], cta_n[c], cta_k[c], stages[c], occ[c], cluster_m[c]
            tm = (M + cm - 1) // cm
            tm = (tm + cl - 1) // cl * cl               # clusters launch whole
            tn = (N + cn - 1) // cn
            base = B * tm * tn
            kit_all = (K + ck - 1) // ck
            fl_it = 2.0 * cm * cn * ck
            # shared memory: the operand rows the MMA style writes and reads per k-iteration (tiles.py)
            sm_it = smem_rows[c] * ck * in_b
            for j in range(splits.shape[0]):
                sk = splits[j]
                if sk > 1 and (base * sk > n_sms * o or sk > kit_all):
                    break
                kit = (kit_all + sk - 1) // sk
                tiles = base * sk
                per_sm = (tiles + n_sms - 1) // n_sms
                full = per_sm // o
                rem = per_sm - full * o
                active = min(tiles, n_sms)
                epi_s = cm * cn * (out_b if sk == 1 else acc_b) * active / l2_bw
                if sk == 1:                             # D = C + A @ B: C from HBM before the add
                    epi_s += cm * cn * src_b * active / hbm_bw
                sm_time = full * _round_time(o, kit, fl_it, sm_it, peak, smem_bw, lat, st, epi_s)
                if rem > 0:
                    sm_time += _round_time(rem, kit, fl_it, sm_it, peak, smem_bw, lat, st, epi_s)
                kk = float(kit * ck)
                l2_bytes = tiles * (cm + cn / cl) * kk * in_b + mnb * (out_b + src_b)
                partial = 0.0
                if sk > 1:
                    partial = 2.0 * mnb * sk * acc_b    # fp32 partials written, then read by the fix-up
                    l2_bytes += partial
                # HBM: compulsory traffic plus re-reads of the share of the operands L2 cannot hold.
                conc = min(tiles, n_sms * o)
                wt = max(1, conc // sk)                 # distinct output tiles per wave
                wr = min(tm, np.int64(math.ceil(math.sqrt(wt))))
                wc = min(tn, (wt + wr - 1) // wr)
                waves_t = (base + wt - 1) // wt
                wave_reads = waves_t * (wr * cm + wc * cn) * float(K) * in_b
                hbm_bytes = comp_in + max(0.0, wave_reads - comp_in) * spill + mnb * (out_b + src_b)
                if partial > l2_size:
                    hbm_bytes += partial
                l2_s = l2_bytes / l2_bw
                hbm_s = hbm_bytes / hbm_bw
                t = launch + max(sm_time, l2_s, hbm_s)
                if sk > 1:
                    t += lat                            # serialised reduction of the partial tiles
                if t < best:
                    best = t
                    compute_s = per_sm * kit * fl_it / peak
                    smem_s = per_sm * kit * sm_it / smem_bw
                    fout[s, F_TIME] = t
                    fout[s, F_COMPUTE] = compute_s
                    fout[s, F_SMEM] = smem_s
                    fout[s, F_L2] = l2_s
                    fout[s, F_HBM] = hbm_s
                    fout[s, F_HBM_BYTES] = hbm_bytes
                    fout[s, F_L2_BYTES] = l2_bytes
                    fout[s, F_WAVES] = tiles / (sms * o)
                    fout[s, F_SM_TIME] = sm_time
                    iout[s, I_CAND] = c
                    iout[s, I_SPLIT] = sk
                    iout[s, I_OCC] = o
                    if max(l2_s, hbm_s) >= sm_time:
                        iout[s, I_BOUND] = 3 if l2_s >= hbm_s else 4
                    elif sm_time > 2.0 * max(compute_s, smem_s):
                        iout[s, I_BOUND] = 2
                    else:
                        iout[s, I_BOUND] = 0 if compute_s >= smem_s else 1
        fout[s, F_FLOPS] = 2.0 * mnb * K
    return fout, iout
