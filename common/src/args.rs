//! Command-line parsing for the binaries, with their exit statuses: a bad
//! value of a flag (out of range, not a number, not one of the choices) is
//! exit 64 like any other bad argument value, and other bad syntax (an
//! unknown flag, a missing argument) exit 2, clap's convention; `--help`
//! and `--version` print and exit 0.

/// The exit status of a bad flag value.
pub const EXIT_BAD_VALUE: u8 = 64;

/// `T` parsed from the process's arguments, or the exit status after clap
/// printed why not (or the help).
pub fn parse<T: clap::Parser>() -> Result<T, std::process::ExitCode> {
    parse_from(std::env::args_os()).map_err(std::process::ExitCode::from)
}

/// [`parse`] of `args` (the program's name first); the error is the exit
/// status, clap's message printed.
pub fn parse_from<T: clap::Parser>(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<T, u8> {
    T::try_parse_from(args).map_err(|e| {
        let _ = e.print();
        exit_status(&e)
    })
}

/// The exit status of a parse error `e`.
pub fn exit_status(e: &clap::Error) -> u8 {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // clap reports a flag given no value as an invalid empty value: that
    // is syntax.
    let missing = matches!(
        e.get(ContextKind::InvalidValue),
        Some(ContextValue::String(v)) if v.is_empty()
    );
    match e.kind() {
        _ if e.exit_code() == 0 => 0,
        ErrorKind::ValueValidation | ErrorKind::InvalidValue if !missing => EXIT_BAD_VALUE,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        sec: Option<u64>,
        #[arg(long, value_parser = ["a", "b"])]
        kind: Option<String>,
    }

    fn status(args: &[&str]) -> u8 {
        let argv = std::iter::once("t").chain(args.iter().copied());
        match Args::try_parse_from(argv) {
            Ok(_) => 0,
            Err(e) => exit_status(&e),
        }
    }

    #[test]
    fn a_bad_value_is_64_and_bad_syntax_2() {
        assert_eq!(status(&["--sec", "5"]), 0);
        assert_eq!(status(&["--sec", "0"]), 64);
        assert_eq!(status(&["--sec", "99999999999999999999"]), 64);
        assert_eq!(status(&["--sec", "x"]), 64);
        assert_eq!(status(&["--kind", "c"]), 64);
        assert_eq!(status(&["--nope"]), 2);
        assert_eq!(status(&["--sec"]), 2);
        assert_eq!(status(&["--help"]), 0);
    }
}
