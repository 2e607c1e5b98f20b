/**
 * Graft: tensor compute graphs for Deno with a Zig core. Build a graph from op builders, give
 * its tensors memory on a backend, and compute it in one native call.
 *
 * @example
 * ```ts
 * import { allocTensors, Context, CpuBackend, Graph, mulMat, silu } from "./mod.ts";
 * using cpu = new CpuBackend();
 * const ctx = new Context();
 * const w = ctx.newTensor("f32", [64, 32]); // K=64 inputs, M=32 outputs
 * const x = ctx.newTensor("f32", [64, 8]); // N=8 tokens
 * const y = silu(mulMat(w, x)); // [32, 8]
 * const graph = Graph.build(y);
 * using memory = allocTensors(cpu, [...ctx.tensors, ...graph.nodes]);
 * cpu.setTensor(w, new Float32Array(64 * 32).fill(0.01));
 * cpu.setTensor(x, new Float32Array(64 * 8).fill(1));
 * cpu.graphCompute(graph);
 * console.log(cpu.getTensor(y)[0]);
 * ```
 *
 * @module
 */

export {
  type DType,
  DTYPE_NAMES,
  DTYPES,
  dtypeSize,
  type DTypeTraits,
  isDType,
  isTensorDType,
  parseDType,
  parseTensorDType,
  rowBytes,
  type TensorData,
  type TensorDType,
  WEIGHT_DTYPES,
} from "./src/dtype.ts";
export * from "./src/errors.ts";
export { closeLibrary, type LoadOptions } from "./src/core/ffi.ts";
export {
  CoreOp,
  type CoreOpName,
  Op,
  type OpCode,
  type OpInfo,
  opInfo,
  type OpName,
  opName,
  OPS,
  type OpSupport,
} from "./src/op.ts";
export { type Dims, formatShape, type Placement, Tensor, type TensorInit } from "./src/tensor.ts";
export { Context, type Shape } from "./src/context.ts";
export { Graph } from "./src/graph.ts";
export {
  type DotCluster,
  type DotExtraEdge,
  type DotOptions,
  graphToDot,
  toDot,
  type ToDotOptions,
} from "./src/viz/graph_dot.ts";
export {
  add,
  type BinaryOptions,
  div,
  gelu,
  mul,
  relu,
  repeat,
  scale,
  silu,
  sqr,
  sqrt,
  sub,
} from "./src/ops/elementwise.ts";
export { mean, sum } from "./src/ops/reduce.ts";
export {
  abs,
  ceil,
  clamp,
  cos,
  elu,
  exp,
  floor,
  geluErf,
  geluQuick,
  hardSigmoid,
  hardSwish,
  leakyRelu,
  log,
  neg,
  round,
  sgn,
  sigmoid,
  sin,
  step,
  tanh,
  trunc,
} from "./src/ops/unary.ts";
export { argmax, countEqual, cumsum, maxRows, minRows, sumRows } from "./src/ops/reduce_rows.ts";
export { norm, rmsNorm, softmax, type SoftmaxOptions } from "./src/ops/norm.ts";
export { rope, type RopeMode, type RopeOptions } from "./src/ops/rope.ts";
export { mulMat, type MulMatOptions } from "./src/ops/matmul.ts";
export { geglu, glu, type GluKind, type GluOptions, reglu, swiglu } from "./src/ops/glu.ts";
export { permute, reshape, transpose, view } from "./src/ops/view.ts";
export { cont, cpy, getRows, setRows } from "./src/ops/copy.ts";
export {
  arange,
  concat,
  diagMaskInf,
  fill,
  pad,
  type PadAmounts,
  padCircular,
  padExt,
  padReflect1d,
  repeatBack,
  roll,
  tri,
  type TriKind,
  TriType,
} from "./src/ops/indexing.ts";
export { argsort, type SortOrder, topK } from "./src/ops/sort.ts";
export { acc, set, set1d, set2d, type ViewOptions } from "./src/ops/view_write.ts";
export { flashAttnExt, type FlashAttnOptions } from "./src/ops/attention.ts";
export { groupNorm, l2Norm } from "./src/ops/group_norm.ts";
export { pool1d, pool2d, type PoolOp, type PoolOptions } from "./src/ops/pool.ts";
export {
  interpolate,
  type InterpolateMode,
  type InterpolateOptions,
  timestepEmbedding,
} from "./src/ops/interpolate.ts";
export {
  conv1d,
  conv2d,
  conv2dDw,
  type ConvOptions,
  convTranspose1d,
  convTranspose2d,
  im2col,
  type Im2colOptions,
} from "./src/ops/conv.ts";
export { dequantize, isQuantDType, QUANT_DTYPES, type QuantDType, quantize } from "./src/quant.ts";
export type {
  Backend,
  BackendBuffer,
  BufferType,
  GraphPlan,
  MappedBuffer,
  MappedFile,
} from "./src/backend/backend.ts";
export {
  CPU_MAX_BUFFER_SIZE,
  CpuBackend,
  type CpuBackendOptions,
} from "./src/backend/cpu/backend.ts";
export { CoreBackend, type CoreBackendOptions } from "./src/backend/cpu/backend.ts";
export {
  WASM_MAX_BUFFER_SIZE,
  WasmBackend,
  type WasmBackendOptions,
} from "./src/backend/wasm/backend.ts";
export { type WasmLoadOptions } from "./src/core/wasm.ts";
export { defaultBackend, type DefaultBackendOptions } from "./src/backend/default.ts";
export { CpuBuffer, CpuMappedBuffer, mappedAlignment } from "./src/backend/cpu/buffer.ts";
export { PlanIdentity } from "./src/backend/plan_identity.ts";
export { type SimdChoice, type SimdLevel, simdLevels } from "./src/backend/cpu/simd.ts";
export { CpuPlan, type CpuPlanOptions } from "./src/backend/cpu/plan.ts";
export type { TableEntry } from "./src/backend/cpu/node_table.ts";
export { allocTensors, allocWeights, BufferSet } from "./src/alloc/alloc_tensors.ts";
export type { InPlaceRule } from "./src/alloc/inplace.ts";
export { type LiveAllocations, liveAllocations } from "./src/core/live.ts";
export {
  allocGraph,
  MemoryPlan,
  type PlanBlock,
  planGraph,
  type PlanOptions,
  type PlanStrategy,
} from "./src/alloc/planner.ts";
export {
  WebGpuBackend,
  type WebGpuBackendOptions,
  WebGpuUnavailableError,
} from "./src/backend/webgpu/backend.ts";
export { WebGpuBuffer } from "./src/backend/webgpu/buffer.ts";
export { WebGpuPlan } from "./src/backend/webgpu/plan.ts";
export {
  RpcBackend,
  type RpcBackendOptions,
  RpcBuffer,
  RpcPlan,
  type RpcRemoteBuffer,
} from "./src/backend/rpc/backend.ts";
export type { RpcServerVersion } from "./src/backend/rpc/connection.ts";
export { RpcServer, type RpcServerOptions } from "./src/rpc/server/server.ts";
export {
  type BackendTimes,
  type ComputeOptions,
  type ComputeStats,
  type Cut,
  manualAssignment,
  Schedule,
  type ScheduleOptions,
  type SplitAllocator,
} from "./src/sched/schedule.ts";
export {
  assignBackends,
  type Assignment,
  type AssignmentReason,
  type AssignOptions,
} from "./src/sched/assign.ts";
export type { Split, SplitInput, SplitSet } from "./src/sched/splits.ts";
export { planToSvg, type SvgOptions } from "./src/viz/timeline_svg.ts";
export {
  type GGUFArray,
  type GGUFHeader,
  type GGUFMetadataEntry,
  type GGUFScalar,
  type GGUFTensorInfo,
  metadataValue,
  readGGUF,
} from "./src/gguf/reader.ts";
export {
  fileSink,
  type GGUFSink,
  type GGUFStreamInput,
  type GGUFWriteInput,
  layoutTensors,
  writeGGUF,
  writeGGUFStream,
} from "./src/gguf/writer.ts";
export {
  GGML_QNT_VERSION,
  isQuantizeType,
  LLAMA_FTYPES,
  planQuantization,
  QUANTIZE_TYPES,
  quantizeGGUF,
  type QuantizeOptions,
  type QuantizePlanOptions,
  type QuantizeSummary,
  type QuantizeType,
  type TensorQuantization,
} from "./src/gguf/quantize.ts";
export { type TensorsGGUFInput, writeTensorsGGUF } from "./src/gguf/tensors.ts";
export { type ByteSource, FileSource, MemorySource } from "./src/gguf/source.ts";
export {
  type GgmlType,
  ggmlType,
  ggmlTypeByName,
  ValueType,
  type ValueTypeName,
} from "./src/gguf/types.ts";
export {
  GGUFFile,
  type GGUFLoadOptions,
  type LoadedWeights,
  type LoadProgress,
} from "./src/gguf/file.ts";
export {
  type DetokenizeOptions,
  type StreamDecoder,
  type TokenizeOptions,
  Tokenizer,
  TokenizerError,
  TokenType,
} from "./src/llm/tokenizer.ts";
export {
  type ChatMessage,
  type ChatRenderOptions,
  ChatTemplate,
  type ChatTemplateOptions,
  TemplateError,
} from "./src/llm/chat_template.ts";
export type { PreTokenizer } from "./src/llm/pretokenize.ts";
export {
  createSampler,
  Sampler,
  type SamplerOptions,
  StopChecker,
  type StopCheckerOptions,
  type StopResult,
} from "./src/llm/sampling.ts";
export {
  ContextFullError,
  type EvalOptions,
  type GenerateOptions,
  type GenerationStats,
  LLM,
  type LLMLoadOptions,
} from "./src/llm/llm.ts";
export {
  LLAMA_ARCHITECTURES,
  type LlamaHParams,
  ModelError,
  readLlamaHParams,
  ropeFactorsName,
  type RopeScalingType,
} from "./src/llm/hparams.ts";
export { KvCache, type KvCacheType, type KvLayer } from "./src/llm/kv_cache.ts";
export type { LayerSplit, LayerStage } from "./src/llm/plan_cache.ts";
export {
  buildLlamaGraph,
  type LlamaGraph,
  type LlamaGraphOptions,
  type LlamaGraphShape,
  type LlamaLayerWeights,
  type LlamaWeights,
  llamaWeights,
  type LlamaWeightsOptions,
} from "./src/llm/llama_graph.ts";
