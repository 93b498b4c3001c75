/**
 * The device's phase-2 plan from the round document and the broadcast (fre_protocol/roles/ledger.py,
 * ddg_config_for, and noise_plan.py, CountSizing). A round with ε = ∞ needs no accounting:
 * σ_int = 0 and the finest γ whose noiseless aggregate of n users fits the ring. A DP round's γ
 * and σ_int come from the privacy accountant (accountant.ts): the configuration calibrated at the
 * release floor, and the σ_int the device's released count asks for.
 */
import { ANALYTIC_ACCOUNTANT, CountSizing, DEFAULT_ROTATION_SEED, dpDdgConfig, isDp } from "./accountant.js";
import type { DDGConfig } from "./ddg.js";
import type { Phase2Inputs, RoundDocument } from "./user.js";

/** ceil(τ − 1e-9·max(1, |τ|)), at least 1 (mechanism.fre_e2t.release_threshold). */
export function releaseThreshold(round: RoundDocument): number {
  const p = round.params as Record<string, unknown>;
  const dp = p.epsilon !== "inf" && Number.isFinite(Number(p.epsilon));
  const tau = (dp ? Number(p.p_sample) : 1.0) * Number(p.threshold);
  return Math.max(1, Math.max(0, Math.ceil(tau - 1e-9 * Math.max(1.0, Math.abs(tau)))));
}

export function noiselessDdgConfig(round: RoundDocument, maxCount: number): DDGConfig {
  const p = round.params as Record<string, unknown>;
  if (p.epsilon !== "inf") throw new Error(`the noiseless DDG configuration is for rounds with epsilon "inf", got ${JSON.stringify(p.epsilon)}`);
  const protocol = round.protocol as Record<string, unknown>;
  const bits = Number(protocol.modulus_bits ?? 24);
  const k = Number(protocol.modulus_stddevs ?? 8.0);
  const clip = Number(p.clip);
  const floor = releaseThreshold(round);
  const n = Math.max(maxCount > 0 ? maxCount : floor, floor);
  const padded = 2 ** Math.ceil(Math.log2(round.dim));
  const room = Number(1n << BigInt(bits)) ** 2 - k * k * n;
  if (room <= 0) throw new Error(`modulus_bits = ${bits} cannot hold ${n} users' rounding`);
  const gamma = ((1.01 * 2.0 * k * Math.sqrt((clip ** 2 * n * n) / padded)) / Math.sqrt(room));
  return {
    dim: round.dim, padded_dim: padded, gamma, sigma_int: 0.0, modulus_bits: bits, clip, beta: 0.0,
    // No noise, so no accountant reads it: Python leaves DDGConfig's default, the analytic one.
    rotation_seed: DEFAULT_ROTATION_SEED, rotate: true, accountant: ANALYTIC_ACCOUNTANT,
  };
}

/**
 * What a device needs for phase 2, from the round document, the broadcast's largest count
 * (``maxCount``, which sizes the ring) and the count the broadcast gave its own tag (``count``:
 * null when its tag was not released, and it sends cover): the DDG configuration and the σ_int
 * its count asks for (the configuration's own where it sends cover, which adds no noise).
 */
export function phase2Inputs(round: RoundDocument, maxCount: number, count: number | null): Phase2Inputs {
  if (!isDp(round)) return { ddgConfig: noiselessDdgConfig(round, maxCount), sigmaInt: 0 };
  const ddgConfig = dpDdgConfig(round, maxCount);
  const sigmaInt = count === null ? ddgConfig.sigma_int : new CountSizing(round, ddgConfig).sigma(count);
  return { ddgConfig, sigmaInt };
}
