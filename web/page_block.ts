/**
 * The transformer block the web page computes (the demo's, smaller: a page should answer in a
 * blink). Its own module so the browser test computes the same block on the Deno CPU backend.
 * @module
 */

import type { BlockConfig } from "../demo/block.ts";

/** dim 128, 4 heads, 16 tokens, ffn 352. */
export const PAGE_BLOCK: BlockConfig = { dim: 128, heads: 4, seq: 16, ffn: 352, eps: 1e-5 };
