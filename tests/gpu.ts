// The one WebGPU backend the test files share. Every test file that opened a device of its own
// (three or four devices in one `deno test` process) made Deno 2.9.6 abort at exit now and then
// with a glibc heap error on Mesa's lavapipe; with one shared device it does not. The shared
// backend is never disposed: the process ends with it.
import { WebGpuBackend } from "../src/backend/webgpu/backend.ts";

let opened: Promise<WebGpuBackend | null> | null = null;

/** The shared backend, or null (with the reason printed once) where there is no adapter. */
export function sharedWebGpu(): Promise<WebGpuBackend | null> {
  opened ??= WebGpuBackend.create().catch((error: unknown) => {
    console.warn(`WebGPU tests skipped: ${(error as Error).message}`);
    return null;
  });
  return opened;
}
