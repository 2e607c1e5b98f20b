//! The threaded wasm build only (root.zig imports it there). Each instance of the module starts
//! with the linker's initial stack pointer, the main thread's stack: a worker's instance moves
//! it onto a stack of its own (from graft_wasm_alloc) before it calls anything else. The stack
//! pointer is a linker global that Zig cannot name, so this one function is assembly, as
//! wasi-libc's wasi_thread_start.s sets it.

comptime {
    asm (
        \\.globaltype __stack_pointer, i32
        \\.globl graft_wasm_set_stack
        \\.export_name graft_wasm_set_stack, graft_wasm_set_stack
        \\.functype graft_wasm_set_stack (i32) -> ()
        \\graft_wasm_set_stack:
        \\  .functype graft_wasm_set_stack (i32) -> ()
        \\  local.get 0
        \\  global.set __stack_pointer
        \\  end_function
    );
}
