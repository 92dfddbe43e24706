//! The `conclave` command line: `serve`, `check` and `mock`.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use conclave::server::Listeners;
use conclave::{Control, Listen};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing_subscriber::EnvFilter;

/// mimalloc, through the adapter that keeps it on its fast path.
#[global_allocator]
static GLOBAL: conclave::alloc::Allocator = conclave::alloc::Allocator;

#[derive(Parser)]
#[command(
    name = "conclave",
    version,
    about = "An OpenAI-compatible gateway that convenes several models behind one model name",
    after_help = "Start with the built-in demo (simulated models, no keys, no network):\n  conclave serve --config config/demo.toml"
)]
struct Cli {
    /// Log format on stderr: `text` (coloured only on a terminal) or `json`
    /// (one object per line, for log shippers). `RUST_LOG` sets the level.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

const DEFAULT_CONFIG: &str = "config/conclave.toml";

#[derive(Subcommand)]
enum Command {
    /// Run the gateway. SIGHUP reloads the config, SIGTERM drains and stops.
    Serve {
        /// The config file (TOML; see docs/configuration.md).
        #[arg(long, env = "CONCLAVE_CONFIG", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Where to listen, overriding `server.listen` (e.g. 127.0.0.1:0;
        /// the Docker image sets 0.0.0.0:4000).
        #[arg(long, env = "CONCLAVE_LISTEN")]
        listen: Option<SocketAddr>,
    },
    /// Validate a config: print the resolved strategy graph and warnings
    /// (an unset secret's variable is one), or every error with its key
    /// path (exit status 2).
    Check {
        /// The config file to check.
        #[arg(long, env = "CONCLAVE_CONFIG", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Also ask every upstream whether it answers, and every llama-swap
        /// upstream what it has loaded (exit status 1 if any cannot say);
        /// every secret must then be set.
        #[arg(long)]
        probe: bool,
    },
    /// Run a checkable task set (JSONL) through routes, in-process or
    /// against a running gateway, and report accuracy (95 % interval),
    /// cost, tokens, latency and what each strategy did, with paired tests
    /// between routes (see docs/eval.md).
    Eval(conclave::eval::cli::EvalArgs),
    /// Run a standalone simulated OpenAI-compatible + llama-swap server.
    Mock {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8081")]
        listen: SocketAddr,
        /// Serve the simulated models of a `kind = "mock"` upstream of this
        /// config (others get 404); without it every model name echoes.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Which mock upstream of the config (default: the first).
        #[arg(long)]
        upstream: Option<String>,
        /// Simulated llama-swap load time when another model is requested.
        #[arg(long, value_parser = humantime::parse_duration)]
        swap_delay: Option<Duration>,
        /// With --swap-delay: llama-swap's `sendLoadingState` (a loading
        /// banner as `reasoning_content` on cold streamed requests).
        #[arg(long)]
        send_loading_state: bool,
        /// With --config: answer models the config does not list by echoing.
        #[arg(long)]
        echo_unknown: bool,
        /// Serve the Responses API (`POST /v1/responses`) too.
        #[arg(long)]
        responses: bool,
    },
}

/// `check --probe`: one line per upstream, what it answered.
async fn probe_upstreams(config: &conclave::config::Config) -> ExitCode {
    let store = match conclave::store::Store::in_memory(conclave::clock::Clock::system()) {
        Ok(s) => std::sync::Arc::new(s),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let graph = match conclave::graph::Graph::build(
        config,
        &conclave::store::records::Records::sqlite(&store),
        &conclave::upstream::registry::Registry::new(),
        &conclave::graph::Kept::default(),
        &conclave::sink::Metrics::noop(),
        conclave::strategy::STRATEGIES,
    ) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let checks = graph
        .upstreams
        .iter()
        .map(|u| async move { (u.name.clone(), u.status().await) });
    let mut healthy = true;
    let mut out = String::from("probe:\n");
    for (name, s) in futures::future::join_all(checks).await {
        let ready = match s.ready {
            Ok(()) => "answers".to_owned(),
            Err(e) => {
                healthy = false;
                format!("unreachable: {e}")
            }
        };
        let loaded = match s.loaded {
            None => String::new(),
            Some(Ok(models)) if models.is_empty() => "; llama-swap has nothing loaded".into(),
            Some(Ok(models)) => format!("; llama-swap has loaded: {}", models.join(", ")),
            Some(Err(e)) => {
                healthy = false;
                format!("; llama-swap's loaded models are unknown: {e}")
            }
        };
        out.push_str(&format!("  upstream {name}: {ready}{loaded}\n"));
    }
    if let Some(cfg) = &config.state {
        let answer = conclave::store::Backend::ping_shared(cfg).await;
        match answer {
            Ok(()) => out.push_str(&format!("  state redis at {}: answers\n", cfg.shown)),
            Err(e) => {
                healthy = false;
                out.push_str(&format!(
                    "  state redis at {}: unreachable: {e}\n",
                    cfg.shown
                ));
            }
        }
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => logs.with_writer(std::io::stderr).json().init(),
        LogFormat::Text => {
            // One event, one line, whatever text it quotes.
            let ansi = std::io::stderr().is_terminal();
            logs.with_writer(conclave::log_line::OneLine { ansi })
                .with_ansi(ansi)
                .init()
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    conclave::sink::Strays::install();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli.command))
}

/// Tells the launcher (and tests) where the server listens.
fn announce(what: &str, addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what} listening on http://{addr}");
    let _ = out.flush();
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

/// Turns signals into [`Control`]s for the gateway: SIGHUP reloads, the
/// first SIGTERM or SIGINT shuts down gracefully, a second one exits at once.
#[cfg(unix)]
async fn signals(tx: mpsc::UnboundedSender<Control>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                let _ = tx.send(Control::Reload);
                continue;
            }
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if stopping {
            tracing::warn!("second stop signal: exiting now");
            std::process::exit(130);
        }
        stopping = true;
        let _ = tx.send(Control::Shutdown);
    }
}

#[cfg(not(unix))]
async fn signals(tx: mpsc::UnboundedSender<Control>) {
    let _ = tokio::signal::ctrl_c().await;
    let _ = tx.send(Control::Shutdown);
    let _ = tokio::signal::ctrl_c().await;
    std::process::exit(130);
}

/// Raises the open-file limit to what the system allows (as Go's runtime
/// does): every client connection and every upstream call holds one.
fn raise_fd_limit(max_connections: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < 2 * max_connections as u64 + 64 => tracing::warn!(
            "the open-file limit is {limit}: too low for server.max_connections = {max_connections} \
             (each connection and each upstream call holds a file descriptor); raise it with ulimit -n"
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("open-file limit unchanged: {e}"),
    }
}

async fn run(command: Command) -> ExitCode {
    match command {
        Command::Serve { config, listen } => {
            if config == Path::new(DEFAULT_CONFIG) && !config.exists() {
                eprintln!(
                    "no config file at {DEFAULT_CONFIG}.\n\
                     Try the built-in demo (simulated models, no keys, no network):\n  \
                     conclave serve --config config/demo.toml\n\
                     or write your own from config/example.toml and docs/configuration.md."
                );
                return ExitCode::from(2);
            }
            let cfg = match conclave::config::load(&config, &conclave::strategy::ALL) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            for w in &cfg.warnings {
                tracing::warn!("{w}");
            }
            // Everything that can fail to open opens before the port is
            // bound and "listening on" is said.
            let prepared = match conclave::prepare(cfg) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let cfg = prepared.config();
            let addr = listen.unwrap_or(cfg.server.listen);
            let listener = match Listeners::bind(addr, cfg.server.limits.workers) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("cannot listen on {addr}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let a = listener.local_addr();
            announce("conclave", a);
            tracing::info!("{}", cfg.summary(a));
            raise_fd_limit(cfg.server.limits.max_connections);
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(signals(tx));
            match prepared
                .run(Listen::Workers(listener), Some(config), rx)
                .await
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Eval(args) => conclave::eval::cli::command(args, Path::new(DEFAULT_CONFIG)).await,
        Command::Check { config, probe } => {
            // Probing calls the upstreams with their keys: only then must
            // every secret be set, as for `serve`.
            let checked = if probe {
                conclave::config::load(&config, &conclave::strategy::ALL)
            } else {
                conclave::config::check(&config, &conclave::strategy::ALL)
            };
            match checked {
                Ok(c) => {
                    {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{}: ok", config.display());
                        let _ = write!(out, "{}", c.describe());
                    }
                    if probe {
                        probe_upstreams(&c).await
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("{e}");
                    eprintln!("{} error(s) in {}", e.errors.len(), config.display());
                    ExitCode::from(2)
                }
            }
        }
        Command::Mock {
            listen,
            config,
            upstream,
            swap_delay,
            send_loading_state,
            echo_unknown,
            responses,
        } => {
            let mut setup = match &config {
                Some(path) => match conclave::config::mock_models(path, upstream.as_deref()) {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                },
                None => Default::default(),
            };
            setup.swap.delay = swap_delay.or(setup.swap.delay);
            setup.swap.loading_state |= send_loading_state;
            let sim = Arc::new(
                conclave::mock::Simulator::new(
                    setup.models,
                    setup.swap,
                    setup.quirks,
                    echo_unknown || config.is_none(),
                )
                .with_responses(responses || setup.responses)
                .with_api(setup.api),
            );
            let listener = match TcpListener::bind(listen).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("cannot listen on {listen}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Ok(a) = listener.local_addr() {
                announce("conclave mock", a);
            }
            match conclave::mock::server::serve(listener, sim, shutdown_signal()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
