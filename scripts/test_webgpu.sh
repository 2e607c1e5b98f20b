#!/usr/bin/env bash
# The WebGPU test files, each in a `deno test` process of its own over one lavapipe device
# (`deno task test:webgpu`).
#
# A file whose process dies of a signal at exit after a clean summary (Mesa's teardown abort)
# runs once more: scripts/retry_teardown_abort.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FILES=(
  tests/backend_ops_test.ts
  tests/op_suite_webgpu_test.ts
  tests/sched_webgpu_test.ts
  tests/webgpu_test.ts
  tests/webgpu_quant_test.ts
  tests/webgpu_llm_test.ts
  tests/webgpu_indexing_test.ts
  tests/sched_fallback_test.ts
  tests/webgpu_neural_test.ts
  tests/webgpu_exact_test.ts
  tests/webgpu_exact_ops_test.ts
  tests/webgpu_exact_quant_test.ts
  tests/webgpu_exact_kquant_test.ts
  tests/webgpu_exact_f16_test.ts
  tests/webgpu_exact_repack_test.ts
)
DENO_TEST=(./scripts/deno test --allow-ffi --allow-env --allow-read --allow-write --allow-run)

for file in "${FILES[@]}"; do
  ./scripts/retry_teardown_abort.sh "test:webgpu $file" "${DENO_TEST[@]}" "$file"
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "test:webgpu: $file failed (exit status $status)"
    exit "$status"
  fi
done
