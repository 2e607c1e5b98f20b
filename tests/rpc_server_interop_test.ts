/**
 * llama.cpp's own RPC client against Graft's RPC server: `llama-completion --rpc` runs SmolLM2
 * greedily on a Graft server (started in this process on a free loopback port) and must print
 * the same text as against llama.cpp's `ggml-rpc-server` and as locally, with flash attention
 * on (FLASH_ATTN_EXT) and off (SOFT_MAX, f16 KV products). Skips, saying why, where the
 * pinned llama.cpp build or the model is missing; nothing is built here.
 */

import assert from "node:assert/strict";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { GgmlRpcServer, llamaBinDir } from "./rpc_server.ts";
import { RpcServer } from "../src/rpc/server/server.ts";
import { CpuBackend, LLM } from "../mod.ts";

const bin = llamaBinDir();
const skip = "skip" in bin
  ? bin.skip
  : !smolLM2Cached()
  ? `no SmolLM2 at ${SMOLLM2_PATH} (deno task model:fetch)`
  : null;
if (skip) console.warn(`rpc_server_interop_test skipped: ${skip}`);

/**
 * llama.cpp's results differ between its AVX2 and AVX-512 builds (flash attention's, for one),
 * and Graft's kernels follow the build of their own level. Graft's server is compared with a
 * local llama-completion of the level Graft runs (GRAFT_CPU=avx2 on an AVX-512 machine: the
 * AVX2 build), or those comparisons skip where that build is missing.
 */
const graftSimd = (() => {
  using cpu = new CpuBackend({ threads: 1 });
  return cpu.simd;
})();
const llamaDir = "dir" in bin ? bin.dir : "";
const graftRefDir = ((): string | null => {
  const dir = llamaDir.replace(/build-[a-z0-9]+\/bin$/, `build-${graftSimd}/bin`);
  try {
    return Deno.statSync(`${dir}/llama-completion`).isFile ? dir : null;
  } catch {
    return null;
  }
})();
const sameSimd = graftRefDir === llamaDir;
if (!skip && graftRefDir === null) {
  console.warn(
    `rpc_server_interop_test: no llama-completion built for ${graftSimd}; ` +
      "Graft's server is compared with ggml-rpc-server only where the levels agree",
  );
}

const PROMPT = "The capital of France is";

async function complete(
  rpc: string | null,
  flashAttn: "on" | "off",
  dir: string = llamaDir,
): Promise<string> {
  const args = [
    "-m",
    SMOLLM2_PATH,
    "-no-cnv",
    "--temp",
    "0",
    "-n",
    "16",
    "-p",
    PROMPT,
    "-t",
    "1",
    "-fa",
    flashAttn,
    "--no-warmup",
    "-c",
    "256",
    // Locally, weights stay as loaded (--no-repack): as on an RPC server, and the repacked
    // kernels of this build stop with SIGILL on some machines (AMX without the kernel's leave).
    ...(rpc ? ["--rpc", rpc, "-ngl", "99"] : ["-ngl", "0", "--no-repack"]),
  ];
  const out = await new Deno.Command(`${dir}/llama-completion`, {
    args,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
    env: { LD_LIBRARY_PATH: dir },
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(
      `llama-completion ${args.join(" ")} failed (${out.code}):\n` +
        new TextDecoder().decode(out.stderr).slice(-3000),
    );
  }
  return text;
}

Deno.test({
  name: "llama-completion --rpc on Graft's server prints what it prints on ggml-rpc-server",
  ignore: skip !== null,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using graft = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    await using ggml = await GgmlRpcServer.start((bin as { dir: string }).dir, 1);
    for (const fa of ["on", "off"] as const) {
      const local = await complete(null, fa);
      const onGgml = await complete(ggml.endpoint, fa);
      const onGraft = await complete(`127.0.0.1:${graft.port}`, fa);
      assert.deepEqual(onGgml, local, `ggml-rpc-server vs local, -fa ${fa}`);
      if (sameSimd) {
        assert.deepEqual(
          onGraft,
          onGgml,
          `Graft's server vs ggml-rpc-server, -fa ${fa}:\n${lines.join("\n")}`,
        );
      } else if (graftRefDir) {
        const reference = await complete(null, fa, graftRefDir);
        assert.deepEqual(onGraft, reference, `Graft's server (${graftSimd}) vs local, -fa ${fa}`);
      }
      // The greedy continuation is longer than the prompt: something was generated.
      assert.deepEqual(onGraft.startsWith(PROMPT) && onGraft.length > PROMPT.length + 8, true);
    }
    // No client was refused along the way.
    assert.deepEqual(lines.filter((l) => l.includes("refused") || l.includes("failed")), []);
  },
});

Deno.test({
  name: "llama-completion with its layers split over Graft's server and ggml-rpc-server",
  // With Graft's kernels of another level than llama.cpp's build, no one reference is exact.
  ignore: skip !== null || !sameSimd,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    await using graft = RpcServer.listen({ port: 0, threads: 1, log: () => {} });
    await using ggml = await GgmlRpcServer.start((bin as { dir: string }).dir, 1);
    const both = await complete(`127.0.0.1:${graft.port},${ggml.endpoint}`, "on");
    assert.deepEqual(both, await complete(null, "on"));
  },
});

Deno.test({
  name: "Graft's server with a cache directory serves llama.cpp's SET_TENSOR_HASH from it",
  ignore: skip !== null,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const cacheDir = await Deno.makeTempDir({ prefix: "graft_rpc_cache_" });
    try {
      await using graft = RpcServer.listen({ port: 0, threads: 1, cacheDir, log: () => {} });
      const endpoint = `127.0.0.1:${graft.port}`;
      const first = await complete(endpoint, "on");
      // The weights above 10 MiB (SmolLM2's q8_0 output matrix) were saved under their hash.
      const files = [...Deno.readDirSync(cacheDir)].map((e) => e.name);
      assert.ok(files.length >= 1, "nothing was cached");
      const stamps = files.map((f) => Deno.statSync(`${cacheDir}/${f}`).mtime?.getTime());
      const second = await complete(endpoint, "on");
      assert.equal(second, first);
      // A hit sends no data: the server writes no file again (a miss would rewrite it).
      assert.deepEqual(
        files.map((f) => Deno.statSync(`${cacheDir}/${f}`).mtime?.getTime()),
        stamps,
      );
    } finally {
      await Deno.remove(cacheDir, { recursive: true });
    }
  },
});

Deno.test({
  name: "Graft's RpcBackend runs SmolLM2 on Graft's server with the local CPU's greedy ids",
  ignore: !smolLM2Cached(),
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const prompt = [504, 3575, 282, 4649, 314]; // "The capital of France is"
    const greedy = async (llm: LLM): Promise<readonly number[]> => {
      for await (
        const _ of llm.generate(prompt, { temperature: 0, maxTokens: 16, reuseCache: false })
      ) {
        // the ids are in lastGeneration
      }
      return llm.lastGeneration!.ids;
    };
    const lines: string[] = [];
    await using server = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    let local: readonly number[];
    {
      using llm = await LLM.load(SMOLLM2_PATH, { threads: 1, nCtx: 64 });
      local = await greedy(llm);
    }
    using llm = await LLM.load(SMOLLM2_PATH, {
      threads: 1,
      nCtx: 64,
      rpc: [`127.0.0.1:${server.port}`],
    });
    const ids = await greedy(llm);
    assert.equal(ids.length, 16);
    assert.deepEqual(ids, local);
    assert.deepEqual(lines.filter((l) => l.includes("refused") || l.includes("failed")), []);
  },
});
