/**
 * SmolLM2 split across two real `ggml-rpc-server` processes (`LLM.load` with `rpc`, llama.cpp's
 * `--rpc`): the embedding stays local, the blocks and the output run on the servers, and greedy
 * ids equal a local CPU run's; and `deno task generate --rpc` prints the same ids. Skipped,
 * visibly, without the pinned llama.cpp build or the cached model.
 */

import assert from "node:assert/strict";
import { LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { GgmlRpcServer, llamaBinDir } from "./rpc_server.ts";
import { nodeOps, watchSentGraphs } from "./rpc_sent_graphs.ts";
import { loadReferenceModel, referenceLogits } from "./llm_reference.ts";

const bin = llamaBinDir();
const skip = "skip" in bin
  ? bin.skip
  : smolLM2Cached()
  ? null
  : `no ${SMOLLM2_PATH} (deno task model:fetch)`;
if (skip) console.warn(`rpc_llm_test: skipped: ${skip}`);
const binDir = "dir" in bin ? bin.dir : "";
// The servers are child processes and their sockets outlive a test's own ops.
const opts = { ignore: skip !== null, sanitizeResources: false, sanitizeOps: false };
const PROMPT = [504, 3575, 282, 4649, 314]; // "The capital of France is"
const N = 16;

async function greedy(llm: LLM): Promise<readonly number[]> {
  for await (const _ of llm.generate(PROMPT, { temperature: 0, maxTokens: N, reuseCache: false })) {
    // the ids are in lastGeneration
  }
  return llm.lastGeneration!.ids;
}

Deno.test({
  name: "rpc llm: SmolLM2 over two ggml-rpc-servers gives the local CPU's greedy ids",
  ...opts,
  fn: async () => {
    await using s1 = await GgmlRpcServer.start(binDir, 1);
    await using s2 = await GgmlRpcServer.start(binDir, 1);
    let local: readonly number[];
    {
      using llm = await LLM.load(SMOLLM2_PATH, { threads: 1, nCtx: 64 });
      local = await greedy(llm);
    }
    using llm = await LLM.load(SMOLLM2_PATH, {
      threads: 1,
      nCtx: 64,
      rpc: [s1.endpoint, s2.endpoint],
    });
    // Both servers report the same free memory: 15 blocks each; the output on the second.
    assert.equal(llm.split?.from, 0);
    assert.deepEqual(llm.split?.more?.map((s) => s.from), [15]);
    assert.equal(llm.split?.second.name, `RPC0[${s1.endpoint}]`);
    const ids = await greedy(llm);
    assert.equal(ids.length, N);
    assert.deepEqual(ids, local);
  },
});

Deno.test({
  name: "rpc llm: deno task generate --rpc prints the same greedy ids as without",
  ...opts,
  fn: async () => {
    await using s1 = await GgmlRpcServer.start(binDir, 1);
    const run = async (extra: string[]): Promise<number[]> => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--allow-ffi",
          "--allow-env",
          "--allow-read",
          "--allow-run",
          "--allow-net=127.0.0.1",
          new URL("../tools/generate.ts", import.meta.url).pathname,
          "--prompt-ids",
          PROMPT.join(","),
          "-n",
          "8",
          "--temp",
          "0",
          "-t",
          "1",
          "-c",
          "64",
          "--json",
          ...extra,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      return JSON.parse(text.trim().split("\n").at(-1)!).ids;
    };
    const local = await run([]);
    assert.equal(local.length, 8);
    assert.deepEqual(await run(["--rpc", s1.endpoint]), local);
  },
});

Deno.test({
  name: "rpc llm: one server gets q, k, v and gate, up fused: 3 matrix products a block for a " +
    "token, not 5 (a prompt: 4), one rope, and the logits of the unfused graph bit for bit",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    // The matrix products of each graph the connection sends (GRAPH_COMPUTE), by graph.
    const products: number[] = [];
    const ropes: number[] = [];
    using _watch = watchSentGraphs((g) => {
      products.push(nodeOps(g).filter((op) => op === "MUL_MAT").length);
      ropes.push(nodeOps(g).filter((op) => op === "ROPE").length);
    });
    const run = async (
      fuse: boolean,
    ): Promise<
      { logits: Float32Array[]; prompt: number; decode: number; decodeRopes: number }
    > => {
      using llm = await LLM.load(SMOLLM2_PATH, {
        threads: 1,
        nCtx: 64,
        rpc: [server.endpoint],
        fuseProjections: fuse,
      });
      products.length = 0;
      ropes.length = 0;
      const logits = [Float32Array.from(await llm.eval(PROMPT))];
      for (const id of [12, 7, 300, 4000]) logits.push(Float32Array.from(await llm.eval([id])));
      return { logits, prompt: products[0]!, decode: products[1]!, decodeRopes: ropes[1]! };
    };
    const fused = await run(true);
    const apart = await run(false);
    const nLayer = 30;
    // A block: 7 weight products apart (q, k, v, o, gate, up, down), 4 fused (qkv, o, gate+up,
    // down), and 2 attention products; then the output.
    assert.equal(apart.decode, 7 * nLayer + 1 + 2 * nLayer);
    assert.equal(fused.decode, apart.decode - 3 * nLayer);
    // A token's q and k heads, adjacent in the fused product, turned by one rope.
    assert.deepEqual([apart.decodeRopes, fused.decodeRopes], [2 * nLayer, nLayer]);
    // A prompt: q, k, v as one product (strided views); gate and up apart, but in the last
    // block, whose feed-forward runs for the last token alone.
    assert.equal(apart.prompt, apart.decode);
    assert.equal(fused.prompt, apart.prompt - 2 * nLayer - 1);
    fused.logits.forEach((l, step) => {
      const other = apart.logits[step]!;
      const at = l.findIndex((v, i) => !Object.is(v, other[i]));
      assert.equal(at, -1, `step ${step}: logit ${at} is ${l[at]} fused, ${other[at]} apart`);
    });
  },
});

Deno.test({
  name: "rpc llm: flash attention on one ggml-rpc-server: one FLASH_ATTN_EXT a block and no " +
    "SOFT_MAX; the prompt's logits against the f64 reference (NMSE <= 1e-2, |error| <= 1.5)",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    const sent: string[][] = [];
    using _watch = watchSentGraphs((g) => sent.push(nodeOps(g)));
    using remote = await LLM.load(SMOLLM2_PATH, {
      threads: 1,
      nCtx: 64,
      flashAttn: true,
      rpc: [server.endpoint],
    });
    // The prompt's graph and a decoding step's (each sent once: later steps reuse it).
    for (const [step, ids] of [PROMPT, [12]].entries()) {
      sent.length = 0;
      const got = await remote.eval(ids);
      const ops = sent.flat();
      assert.equal(ops.filter((op) => op === "FLASH_ATTN_EXT").length, 30, `step ${step}`);
      assert.equal(ops.filter((op) => op === "SOFT_MAX").length, 0, `step ${step}`);
      if (step > 0) continue;
      // ggml-cpu's flash attention (V summed in f16) with ggml's q8 activations: as the local
      // CPU's flash attention against f64 (tests/llm_test.ts). Measured: NMSE 3.3e-3, 0.75.
      const want = referenceLogits(await loadReferenceModel(SMOLLM2_PATH), PROMPT, [4])[0]!;
      let num = 0, den = 0, max = 0;
      for (let i = 0; i < want.length; i++) {
        const d = got[i]! - want[i]!;
        num += d * d;
        den += want[i]! * want[i]!;
        max = Math.max(max, Math.abs(d));
      }
      assert.ok(num / den <= 1e-2 && max <= 1.5, `NMSE ${num / den}, max ${max}`);
    }
  },
});
