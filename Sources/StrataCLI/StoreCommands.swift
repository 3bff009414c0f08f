// One-shot commands on a whole store: stat, verify, dump, checkpoint, backup, compact.
import ArgumentParser
import Strata
import Foundation
import StrataWAL

struct StatCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stat", abstract: "Pages, tree height, keys, free pages, log segments, last checkpoint, compression.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        try withStore(path) { store in
            for line in try statusLines(store) { print(line) }
            let check = store.engine.verify()
            let keyCount = try store.read { try $0.scan().count }
            print("keys: \(keyCount) live; tree: \(check.leafPages) leaf, \(check.branchPages) branch, "
                  + "\(check.overflowPages) overflow pages; free: \(check.freePages) pages (+\(check.freeListPages) listing them)")
            let log = try WriteAheadLog.read(directory: path + "/wal") { _ in }
            let ratio = log.rawBytes == 0 ? 1 : Double(log.storedBytes) / Double(log.rawBytes)
            print("log holds \(log.batchCount) batch(es): \(log.rawBytes) bytes stored as \(log.storedBytes) "
                  + "(LZ4 ratio \(String(format: "%.2f", ratio)))")
        }
    }
}

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify", abstract: "Check every page of the data file and the log; the exit status says whether all is sound.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        let (report, cut) = try withStore(path) { store in
            // Reading every key also checks the pages and overflow chains reads go through.
            _ = try store.read { try $0.scan().count }
            return (store.engine.verify(), store.recoveryReport.log.damage)
        }
        print(report)
        guard report.isValid else {
            printError("\(path) is damaged: \(report.problems[0])")
            throw ExitCode.failure
        }
        // Opening cut log bytes: the pages are sound, but commits in those bytes may have
        // been acknowledged, so this is not a clean "ok".
        guard cut.isEmpty else {
            printError("\(path): opening cut \(cut.reduce(0) { $0 + $1.byteCount }) byte(s) of the log (\(cut[0])); "
                       + "commits in them may have been acknowledged")
            throw ExitCode.failure
        }
        print("ok")
    }
}

struct DumpCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "dump", abstract: "Print every key and value in key order.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    @Option(help: "Only keys starting with this prefix.")
    var prefix = ""

    @Flag(help: "One JSON object per key: text as strings, other bytes as hex with \"encoding\":\"hex\".")
    var json = false

    func run() throws {
        try withStore(path) { store in
            let pairs = try store.read { try $0.scan(prefix: parseBytes(prefix)) }
            for (key, value) in pairs {
                if json {
                    print(try jsonLine(DumpLine(key: key, value: value)))
                } else {
                    print("\(display(key)) = \(display(value))")
                }
            }
        }
    }
}

/// A dump line: `{"key":…,"value":…}`, with hex and `"encoding":"hex"` for non-text bytes.
struct DumpLine: Encodable {
    let key: String
    let value: String
    let encoding: String?

    init(key: [UInt8], value: [UInt8]) {
        func field(_ bytes: [UInt8]) -> (String, Bool) {
            let shown = display(bytes)
            return (shown, shown.hasPrefix("0x") && shown != String(decoding: bytes, as: UTF8.self))
        }
        let (keyText, keyHex) = field(key)
        let (valueText, valueHex) = field(value)
        self.key = keyText
        self.value = valueText
        self.encoding = keyHex || valueHex ? "hex" : nil
    }
}

struct CheckpointCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint", abstract: "Fold the log into the data file now and release the log segments it covers.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        try withStore(path) { store in
            try store.engine.checkpoint()
            let status = try store.engine.status()
            print("checkpoint at version \(status.checkpointVersion); log: \(status.logSegments.count) segment(s)")
        }
    }
}

struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup", abstract: "Copy the store, consistently, to a new directory (commits may continue meanwhile).")

    @Argument(help: "The new store's directory.")
    var destination: String

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path) { source in
            let report = try source.engine.backup(to: destination)
            print("backed up version \(report.version) to \(destination): \(report.byteCount) bytes")
        }
    }
}

struct CompactCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact", abstract: "Write a new store holding only the live keys (no free pages, no log history).")

    @Argument(help: "The new store's directory.")
    var destination: String

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path) { source in
            let total = try source.read { try $0.scan().count }
            var progress = ProgressReporter(label: "compact", total: total)
            let report = try source.engine.compact(to: destination) { progress.update($0) }
            print("compacted version \(report.version) into \(destination): \(report.keyCount) keys, "
                  + "\(report.byteCount) bytes of data file")
        }
    }
}
