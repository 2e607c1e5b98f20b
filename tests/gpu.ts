// The one WebGPU backend a test process shares. With Deno 2.9.6 on Mesa's lavapipe, a process
// that did much WebGPU work (several devices, or all three WebGPU test files) aborted at exit
// now and then with a glibc heap error after every test had passed; so each WebGPU test file
// runs in its own `deno test` process (the `test` task in deno.json) over one device. The
// shared backend is never disposed: the process ends with it.
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
