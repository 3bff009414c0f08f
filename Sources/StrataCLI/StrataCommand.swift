// The `strata` command-line tool. Until the engine lands, its default subcommand exercises
// the write-ahead log for real (`demo`), and `wal` inspects a log directory.
import ArgumentParser

@main
struct StrataCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "strata",
        abstract: "Strata: an embedded, transactional key/value store with nested contexts.",
        subcommands: [DemoCommand.self, WALCommand.self],
        defaultSubcommand: DemoCommand.self
    )
}
