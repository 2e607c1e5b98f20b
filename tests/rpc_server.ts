/**
 * Real llama.cpp `ggml-rpc-server` processes for tests: found in the pinned build's cache
 * (tools/llama_build.sh: $GRAFT_CACHE or ~/.cache/graft, llama.cpp-0.3.36/build-<simd>/bin),
 * started on a free loopback port, killed when disposed. Tests never build it: where it is
 * missing, `ggmlRpcServerPath()` says why and how to get it, for the test to skip with.
 * @module
 */

import { llamaBuildBin } from "../bench/peers/llama_bench_cli.ts";

/** The pinned build's bin directory for this CPU (or the reason it is missing). */
export function llamaBinDir(): { dir: string } | { skip: string } {
  let dir: string;
  try {
    dir = llamaBuildBin();
  } catch {
    return { skip: "no --allow-env to find the llama.cpp build cache" };
  }
  try {
    if (Deno.statSync(`${dir}/ggml-rpc-server`).isFile) return { dir };
  } catch {
    // fall through to the reason
  }
  return {
    skip: `no ${dir}/ggml-rpc-server; build it with \`deno task llama:build\` ` +
      "(tools/llama_build.sh, about 12 minutes on 2 cores)",
  };
}

/** A free TCP port on 127.0.0.1 (the OS picks one; it is released for the caller to bind). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** A running ggml-rpc-server. */
export class GgmlRpcServer implements AsyncDisposable {
  readonly endpoint: string;
  readonly #child: Deno.ChildProcess;
  #stopped = false;

  private constructor(endpoint: string, child: Deno.ChildProcess) {
    this.endpoint = endpoint;
    this.#child = child;
  }

  /** Starts one on a free port with `threads` CPU threads; resolves once it accepts. */
  static async start(binDir: string, threads = 1): Promise<GgmlRpcServer> {
    const port = freePort();
    const child = new Deno.Command(`${binDir}/ggml-rpc-server`, {
      args: ["-H", "127.0.0.1", "-p", String(port), "-t", String(threads)],
      stdout: "null",
      stderr: "null",
      env: { LD_LIBRARY_PATH: binDir },
    }).spawn();
    const server = new GgmlRpcServer(`127.0.0.1:${port}`, child);
    // Poll until it listens (it loads its backends first: well under a second).
    for (let attempt = 0; attempt < 200; attempt++) {
      try {
        const probe = await Deno.connect({ hostname: "127.0.0.1", port });
        probe.close();
        return server;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }
    await server.stop();
    throw new Error(`ggml-rpc-server did not listen on port ${port} within 5 s`);
  }

  /** Sends SIGSTOP: the process stays connected but answers nothing (a stalled server). */
  pause(): void {
    this.#child.kill("SIGSTOP");
  }

  /** Kills the process and waits for it. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      this.#child.kill("SIGKILL");
    } catch {
      // already gone
    }
    await this.#child.status;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
