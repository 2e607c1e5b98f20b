/**
 * The graphs RPC clients send, as the server decodes them: while the returned object lives,
 * every GRAPH_COMPUTE payload any `RpcConnection` sends is unpacked and handed to `seen`.
 */

import { RpcConnection } from "../src/backend/rpc/connection.ts";
import { RpcCmd, type RpcCmdCode, type RpcGraph, unpackGraph } from "../src/rpc/protocol.ts";
import { ggmlOpName } from "../src/rpc/ggml_ops.ts";

type Call = (cmd: RpcCmdCode, payload: Uint8Array, replySize: number | null) => Promise<
  Uint8Array | null
>;

/** Watches the graphs sent until disposed (then `RpcConnection.call` is itself again). */
export function watchSentGraphs(seen: (graph: RpcGraph) => void): Disposable {
  const proto = RpcConnection.prototype;
  const call = proto.call;
  proto.call = function (
    this: RpcConnection,
    cmd: RpcCmdCode,
    payload: Uint8Array,
    replySize: number | null,
  ): Promise<Uint8Array | null> {
    if (cmd === RpcCmd.GRAPH_COMPUTE) seen(unpackGraph(payload));
    return (call as Call).call(this, cmd, payload, replySize);
  } as typeof call;
  return { [Symbol.dispose]: () => proto.call = call };
}

/** The ggml op names of `graph`'s nodes, in order. */
export function nodeOps(graph: RpcGraph): string[] {
  const byId = new Map(graph.tensors.map((t) => [t.id, t.op]));
  return graph.nodes.map((id) => ggmlOpName(byId.get(id)!) ?? "?");
}
