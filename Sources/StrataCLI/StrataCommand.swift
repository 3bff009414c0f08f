// The `strata` command-line tool: an interactive shell over a store (the default), and
// one-shot commands for operators (stat, verify, dump, wal, get/put/del/scan, checkpoint,
// backup, compact, salvage, bench).
import ArgumentParser

import StrataEngine
import StrataWAL

@main
struct StrataCommand: ParsableCommand {
    /// The tool's release (the CHANGELOG's next version until one is tagged).
    static let release = "0.1.0-dev"

    static let configuration = CommandConfiguration(
        commandName: "strata",
        abstract: "Strata: an embedded, transactional key/value store with nested contexts.",
        discussion: ExitStatus.help,
        version: "strata \(release) (data file format \(StorageEngine.dataFormatVersion), log format \(WALFormat.version))",
        subcommands: [ShellCommand.self, StatCommand.self, VerifyCommand.self, DumpCommand.self, LoadCommand.self, WALCommand.self,
                      GetCommand.self, PutCommand.self, DeleteCommand.self, ScanCommand.self,
                      CheckpointCommand.self, BackupCommand.self, CompactCommand.self, SalvageCommand.self, BenchCommand.self, CrashTestCommand.self,
                      EventsCommand.self, DemoCommand.self],
        defaultSubcommand: ShellCommand.self
    )
}
