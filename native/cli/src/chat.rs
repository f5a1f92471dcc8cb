//! `lutra chat`: a conversation in the model's chat format, one line of stdin per turn.
//! Every turn is appended to the same session, so earlier turns are never processed
//! again; the answer streams to stdout.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use lutra::engine::{CancelFlag, Error, Generation, StopReason, DEFAULT_CONTEXT};
use lutra::ChatHistory;
use lutra::{Role, SessionOptions};

use super::{default_threads, AttentionArgs, ModelArgs, SamplingArgs};

#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A system prompt (as the template places it: Gemma's in front of the first user turn)
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer
    #[arg(short = 'n', long, default_value_t = 512)]
    n_predict: usize,
    #[arg(short, long, default_value_t = default_threads())]
    threads: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Context length (tokens) of the whole conversation, at most the model's own
    #[arg(long, default_value_t = DEFAULT_CONTEXT)]
    ctx: usize,
    #[command(flatten)]
    attention: AttentionArgs,
    /// Print each formatted prompt fed to the model and each answer to stderr (Rust string escapes: `prompt: "..."` and `answer: "..."` lines)
    #[arg(long)]
    verbose_prompt: bool,
}

pub fn chat(a: ChatArgs) -> Result<(), String> {
    let (attention, values) = (a.attention.choice()?, a.attention.values()?);
    let model = a.model.load(true)?;
    if !model.info().chat {
        return Err(Error::NoChatTemplate { architecture: model.info().architecture }.to_string());
    }
    let context = a.ctx.min(model.info().hparams.context_length);
    super::warn_if_codebooks_short(&attention, context);
    let mut session =
        model.session(&SessionOptions { context, threads: a.threads.max(1), attention, values }).map_err(|e| e.to_string())?;
    let (session, gemv) = session.parts();
    let sampler = a.sampling.config();

    // Ctrl-C stops an answer; at the prompt it ends the chat
    let cancel = CancelFlag::new();
    let answering = Arc::new(AtomicBool::new(false));
    {
        let (cancel, answering) = (cancel.clone(), answering.clone());
        ctrlc::set_handler(move || {
            if answering.load(Ordering::SeqCst) {
                cancel.cancel();
            } else {
                eprintln!();
                std::process::exit(0);
            }
        })
        .map_err(|e| format!("cannot catch Ctrl-C: {e}"))?;
    }

    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("chatting with {} ({context} positions); Ctrl-C stops an answer, Ctrl-D ends", model.info().summary());
    }
    let io = |e: std::io::Error| e.to_string();
    let mut out = std::io::stdout().lock();
    let mut lines = std::io::stdin().lock().lines();
    let mut first = true;
    let mut history = ChatHistory::new();
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let mut turns = Vec::new();
        if let (true, Some(system)) = (first, a.system.as_deref()) {
            turns.push((Role::System, system));
        }
        turns.push((Role::User, line.as_str()));
        // cleared first where the template re-formats earlier turns (`restart`)
        let prompt = history.next_turn(session, &turns).map_err(|e| e.to_string())?;
        if a.verbose_prompt {
            if prompt.restart {
                eprintln!("restart: the template formats the earlier turns differently now; the conversation is fed again");
            }
            eprintln!("prompt: {:?}", prompt.text);
        }
        let tokens = prompt.tokens;
        cancel.reset();
        let mut generation = match Generation::start(session, &tokens, sampler, a.n_predict) {
            Ok(g) => g.with_cancel_flag(cancel.clone()),
            Err(e @ Error::PromptTooLong { .. }) => {
                eprintln!("{e}: the conversation ends here (--ctx sets the context)");
                break;
            }
            Err(e) => return Err(e.to_string()),
        };
        first = false;
        answering.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let mut answer = String::new();
        while let Some(piece) = generation.next_piece(session, &gemv).map_err(|e| e.to_string())? {
            answer.push_str(piece);
            out.write_all(piece.as_bytes()).and_then(|_| out.flush()).map_err(io)?;
        }
        answering.store(false, Ordering::SeqCst);
        writeln!(out).map_err(io)?;
        if a.verbose_prompt {
            eprintln!("answer: {answer:?}");
        }
        history.add_answer(&answer);
        out.flush().map_err(io)?;
        // only this turn's tokens were computed: earlier turns stay in the session
        eprintln!(
            "[{} new prompt tokens, {} generated in {:.2} s; {} of {context} positions used]",
            tokens.len(),
            generation.generated(),
            t.elapsed().as_secs_f64(),
            session.position()
        );
        match generation.stop_reason() {
            Some(StopReason::ContextFull) => {
                eprintln!("the context is full ({context} positions): the conversation ends here");
                break;
            }
            Some(StopReason::Cancelled) => eprintln!("(stopped)"),
            _ => {}
        }
    }
    Ok(())
}
