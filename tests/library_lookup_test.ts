/**
 * Finding and loading the native library: missing permissions name their flag, a checkout
 * whose path has spaces still finds its build, a module loaded over http says what to do.
 * Each case runs in a child Deno with exactly the permissions it is about.
 */

import assert from "node:assert/strict";

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";
const canServe = Deno.permissions.querySync({ name: "net", host: "127.0.0.1" }).state === "granted";
const root = new URL("../", import.meta.url);
const modUrl = new URL("mod.ts", root).href;

const probe = (mod: string): string => `
  import * as g from ${JSON.stringify(mod)};
  try { const cpu = new g.CpuBackend({ threads: 1 }); cpu.dispose(); console.log("ok"); }
  catch (e) { console.log(e.name + ": " + e.message); }
`;

/** Runs `script` with `deno run` and exactly `flags` (`deno eval` would grant everything). */
async function child(
  flags: string[],
  script: string,
  env: Record<string, string> = {},
): Promise<string> {
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(file, script);
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, file],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  await Deno.remove(file);
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 0, stderr);
  return new TextDecoder().decode(output.stdout).trim();
}

Deno.test({
  name: "without --allow-ffi the error names --allow-ffi (was: library not found)",
  ignore: !canRun,
  fn: async () => {
    const out = await child(["--allow-read", "--allow-env"], probe(modUrl));
    assert.match(out, /^LibraryLoadError: .*--allow-ffi/);
  },
});

Deno.test({
  name: "without --allow-read the error names --allow-read (was: library not found)",
  ignore: !canRun,
  fn: async () => {
    const out = await child(["--allow-ffi", "--allow-env"], probe(modUrl));
    assert.match(out, /^LibraryLoadError: .*--allow-read/);
  },
});

Deno.test({
  name: "a checkout whose path has spaces finds its build output",
  ignore: !canRun,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "graft lookup with spaces " });
    try {
      // The modules and the built library, laid out as in a checkout.
      const copy = async (from: URL, to: string): Promise<void> => {
        for await (const entry of Deno.readDir(from)) {
          const source = new URL(entry.name + (entry.isDirectory ? "/" : ""), from);
          if (entry.isDirectory) {
            await Deno.mkdir(`${to}/${entry.name}`, { recursive: true });
            await copy(source, `${to}/${entry.name}`);
          } else if (entry.name.endsWith(".ts")) {
            await Deno.copyFile(source, `${to}/${entry.name}`);
          }
        }
      };
      await Deno.mkdir(`${dir}/src`, { recursive: true });
      await copy(new URL("src/", root), `${dir}/src`);
      await Deno.copyFile(new URL("mod.ts", root), `${dir}/mod.ts`);
      await Deno.mkdir(`${dir}/zig-out/lib`, { recursive: true });
      await Deno.copyFile(
        new URL("zig-out/lib/libgraft.so", root),
        `${dir}/zig-out/lib/libgraft.so`,
      );
      const mod = new URL(`file://${encodeURI(`${dir}/mod.ts`)}`).href;
      assert.match(mod, /%20/, "the module URL escapes the spaces");
      const out = await child(["-A"], probe(mod), { GRAFT_LIB: "" });
      assert.equal(out, "ok");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "a module loaded over http says it ships no library and to set GRAFT_LIB",
  ignore: !canRun || !canServe,
  fn: async () => {
    const controller = new AbortController();
    const server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen: () => {} },
      async (request) => {
        const path = new URL(request.url).pathname;
        try {
          const body = await Deno.readTextFile(new URL(`.${path}`, root));
          return new Response(body, { headers: { "content-type": "application/typescript" } });
        } catch {
          return new Response("not found", { status: 404 });
        }
      },
    );
    try {
      const { port } = server.addr;
      const out = await child(
        [`--allow-import=127.0.0.1:${port}`, "--allow-ffi", "--allow-read", "--allow-env"],
        probe(`http://127.0.0.1:${port}/mod.ts`),
        { GRAFT_LIB: "" },
      );
      assert.match(out, /^LibraryLoadError: .*ships no native library.*GRAFT_LIB/);
    } finally {
      controller.abort();
      await server.finished;
    }
  },
});
