//! llama.cpp's flag tables, from `llama-server --help` of the packaged build.

use crate::flags::tables::{Row, STR, SW, any_int, choice, float, int};

/// The tuning flags.
pub(crate) fn rows() -> Vec<Row> {
    let kv_types = choice(&[
        "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
    ]);
    vec![
        (&["--parallel", "-np"], int(-1)),
        (&["--ctx-size", "-c"], int(0)),
        (&["--threads", "-t"], int(-1)),
        (&["--threads-batch", "-tb"], int(-1)),
        (&["--batch-size", "-b"], int(1)),
        (&["--ubatch-size", "-ub"], int(1)),
        // N, "auto" or "all": not one integer type.
        (&["--n-gpu-layers", "-ngl", "--gpu-layers"], STR),
        (&["--cont-batching", "-cb"], SW),
        (&["--no-cont-batching", "-nocb"], SW),
        (&["--flash-attn", "-fa"], choice(&["on", "off", "auto"])),
        (&["--metrics"], SW),
        (&["--cache-type-k", "-ctk"], kv_types.clone()),
        (&["--cache-type-v", "-ctv"], kv_types),
        (&["--kv-unified", "-kvu"], SW),
        (&["--no-kv-unified", "-no-kvu"], SW),
        (
            &["--split-mode", "-sm"],
            choice(&["none", "layer", "row", "tensor"]),
        ),
        (&["--tensor-split", "-ts"], STR),
        (&["--main-gpu", "-mg"], int(0)),
        (&["--fit", "-fit"], choice(&["on", "off"])),
        (&["--cache-ram", "-cram"], int(-1)),
        // 0 makes every request look in the host-RAM prompt cache (`--cache-ram`) for the
        // prompt it shares most with; above 0 a slot sharing that much is used as it is.
        (&["--slot-prompt-similarity", "-sps"], float(0.0, Some(1.0))),
        (&["--cache-prompt"], SW),
        (&["--no-cache-prompt"], SW),
        (&["--no-warmup"], SW),
        (&["--slots"], SW),
        (&["--no-slots"], SW),
        (&["--jinja"], SW),
        (&["--no-jinja"], SW),
        (&["--alias", "-a"], STR),
        (&["--timeout", "-to"], int(1)),
        (&["--seed", "-s"], any_int()),
        (&["--n-predict", "-n", "--predict"], int(-1)),
        (&["--verbosity", "-lv", "--log-verbosity"], int(0)),
        // Sampling runs on the host, once per slot per token, over the whole vocabulary: with
        // Llama 3's 128k tokens it held an H200 to 17 % utilisation at 64 requests in flight
        // (docs/validation/h200.md). `--backend-sampling` moves it to the GPU; `--samplers` and
        // `--top-k` shorten the chain (the server's defaults for requests that set neither).
        (&["--backend-sampling", "-bs"], SW),
        (&["--samplers"], STR),
        (&["--top-k"], int(0)),
    ]
}

/// Flags that load weights or files.
pub(crate) fn gated_rows() -> Vec<Row> {
    vec![
        (&["--lora"][..], STR),
        (&["--chat-template-file"][..], STR),
        (&["--model-draft", "-md"][..], STR),
    ]
}
