// The `strata` command-line tool: an interactive shell over a store (the default), and
// one-shot commands for operators (stat, verify, dump, wal, get/put/del/scan, checkpoint,
// backup, compact, bench).
import ArgumentParser

@main
struct StrataCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "strata",
        abstract: "Strata: an embedded, transactional key/value store with nested contexts.",
        subcommands: [ShellCommand.self, StatCommand.self, VerifyCommand.self, DumpCommand.self, WALCommand.self,
                      GetCommand.self, PutCommand.self, DeleteCommand.self, ScanCommand.self,
                      CheckpointCommand.self, BackupCommand.self, CompactCommand.self, BenchCommand.self, CrashTestCommand.self,
                      DemoCommand.self],
        defaultSubcommand: ShellCommand.self
    )
}
