/**
 * Graft's internals, for its own tests and tools and for those who build on them: the core op
 * codes, the native allocator binding, the in-place rule, the scheduler's split builder, the
 * tokenizer's byte and pre-tokenizer tables, the sampler's generator and the LLM's plan cache.
 * Nothing here is part of the stable API (`mod.ts`); it may change in any release.
 *
 * @example
 * ```ts
 * import { Op } from "./mod.ts";
 * import { coreOp, isViewOp } from "./internal.ts";
 * console.log(isViewOp(Op.reshape), coreOp(Op.add)); // true, the core's code for add
 * ```
 *
 * @module
 */

export { coreOp, isViewOp } from "./src/op.ts";
export { Allocator, type AllocatorOptions, type AllocatorStats } from "./src/alloc/allocator.ts";
export { type InPlaceRule, inPlaceRule } from "./src/alloc/inplace.ts";
export { buildSplits } from "./src/sched/splits.ts";
export {
  BYTE_TO_UNICODE,
  PRE_TOKENIZER_NAMES,
  preTokenizer,
  splitWithPatterns,
  UNICODE_TO_BYTE,
} from "./src/llm/pretokenize.ts";
export { MT19937 } from "./src/llm/sampling.ts";
export { PlanCache, PLANS_KEPT } from "./src/llm/plan_cache.ts";
