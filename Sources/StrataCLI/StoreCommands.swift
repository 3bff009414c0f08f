// One-shot commands on a whole store: stat, verify, dump, load, checkpoint, backup,
// compact. The ones that only read (stat, verify, dump, backup, compact) open the store
// read-only: they change no byte and no mtime of it (but their slot in the reader table),
// several may run at once, and they run beside a process that writes the store.
import ArgumentParser
import Strata
import Foundation
import StrataWAL

struct StatCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stat",
        abstract: "Pages, tree height, keys, free pages, log segments, last checkpoint, compression. Read-only.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    @Flag(help: "One JSON object with every figure.")
    var json = false

    /// `stat --json`.
    private struct StatLine: Encodable {
        var version, checkpointVersion: UInt64
        var pageBytes: Int
        var pageCount: UInt64
        var treeHeight, liveKeys, leafPages, branchPages, overflowPages, freePages, freeListPages: Int
        var memtableKeys, memtableBytes: Int
        var logSegments, logBytes, logBatches, logRawBytes, logStoredBytes: Int
        /// The process writing the store (nil when none), the other open readers, and the
        /// freed pages that wait for readers of older trees.
        var writerProcess: Int32?
        var readers: Int
        var pagesHeldForReaders: UInt64
    }

    func run() throws {
        try withStore(path, mode: .readOnly) { store in
            let status = try store.status()
            let check = store.verify()
            let keyCount = try store.read { try $0.scan().count }
            // What the open read of the log (batches the data file holds verified by their
            // frames, not decoded again, as every command reads them).
            let log = store.recoveryReport.log
            if json {
                print(try jsonLine(StatLine(
                    version: status.version, checkpointVersion: status.checkpointVersion, pageBytes: status.pageBytes,
                    pageCount: status.pageCount, treeHeight: status.treeHeight, liveKeys: keyCount,
                    leafPages: check.leafPages, branchPages: check.branchPages, overflowPages: check.overflowPages,
                    freePages: check.freePages, freeListPages: check.freeListPages, memtableKeys: status.memtableKeys,
                    memtableBytes: status.memtableBytes, logSegments: status.logSegments.count, logBytes: status.logBytes,
                    logBatches: log.batchCount, logRawBytes: log.rawBytes, logStoredBytes: log.storedBytes,
                    writerProcess: status.writerProcess, readers: status.readers.count,
                    pagesHeldForReaders: status.pagesHeldForReaders)))
                return
            }
            for line in try statusLines(store) { print(line) }
            print("keys: \(keyCount) live; tree: \(check.leafPages) leaf, \(check.branchPages) branch, "
                  + "\(check.overflowPages) overflow pages; free: \(check.freePages) pages (+\(check.freeListPages) listing them)")
            let ratio = log.rawBytes == 0 ? 1 : Double(log.storedBytes) / Double(log.rawBytes)
            print("log holds \(log.batchCount) batch(es): \(log.rawBytes) bytes stored as \(log.storedBytes) "
                  + "(LZ4 ratio \(String(format: "%.2f", ratio)))")
        }
    }
}

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every page of the data file and the log; the exit status says whether all is sound. Read-only.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    @Flag(help: "One JSON object: the counts, the problems and the log damage found.")
    var json = false

    /// `verify --json`.
    private struct VerifyLine: Encodable {
        var ok: Bool
        var metaGeneration, pageCount: UInt64
        var treeHeight, leafPages, branchPages, overflowPages, freePages, freeListPages, keys, tombstones: Int
        var problems, logDamage: [String]
    }

    func run() throws {
        let (report, cut) = try withStore(path, mode: .readOnly) { store in
            // Reading every key also checks the pages and overflow chains reads go through.
            _ = try store.read { try $0.scan().count }
            var progress: ProgressReporter?
            var report = store.verify { checked, pageCount in
                guard pageCount >= ProgressReporter.largeStorePages, isTerminal(STDERR_FILENO) else { return }
                if progress == nil { progress = ProgressReporter(label: "verify", total: pageCount) }
                progress?.update(checked)
            }
            // Record index entries that name no record (the type-free part of RecordIndex.X1).
            report.problems += try store.checkIndexEntries()
            // Beside a live writer, what was checked is the one version this reader holds.
            let status = try store.status()
            if let writer = status.writerProcess, writer != ProcessInfo.processInfo.processIdentifier, !json {
                print("checked version \(status.version), the newest that process \(writer) (writing the store) had made "
                      + "durable; it may have committed more since")
            }
            return (report, store.recoveryReport.log.damage)
        }
        if json {
            print(try jsonLine(VerifyLine(
                ok: report.isValid && !cut.contains(where: \.mayHaveLostCommits), metaGeneration: report.metaGeneration, pageCount: report.pageCount,
                treeHeight: report.treeHeight, leafPages: report.leafPages, branchPages: report.branchPages,
                overflowPages: report.overflowPages, freePages: report.freePages, freeListPages: report.freeListPages,
                keys: report.keys, tombstones: report.tombstones, problems: report.problems,
                logDamage: cut.map(\.description))))
        } else {
            print(report)
        }
        guard report.isValid else {
            printError("\(path) is damaged: \(report.problems[0])")
            throw ExitStatus.no
        }
        // Opening cut log bytes: the pages are sound, but commits in those bytes may have
        // been acknowledged, so this is not a clean "ok".
        let costly = cut.filter(\.mayHaveLostCommits)
        guard costly.isEmpty else {
            printError("\(path): opening cut \(costly.reduce(0) { $0 + $1.byteCount }) byte(s) of the log (\(costly[0])); "
                       + "commits in them may have been acknowledged")
            throw ExitStatus.no
        }
        if !json { print("ok") }
    }
}

struct DumpCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump", abstract: "Print every key and value in key order (`strata load` reads `--json` back). Read-only.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    @Option(help: "Only keys starting with this prefix.")
    var prefix = ""

    @Flag(help: "One JSON object per key: text as strings, other bytes as hex with \"encoding\":\"hex\".")
    var json = false

    func run() throws {
        try withStore(path, mode: .readOnly) { store in
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

/// A line of `dump --json`, `scan --json` and `get --json`, and of what `load` reads:
/// `{"key":…,"value":…}` when both are printable UTF-8 text, else both as `0x…` hex with
/// `"encoding":"hex"` (so a text that happens to start with `0x` still reads back as text).
struct DumpLine: Codable {
    let key: String
    let value: String
    let encoding: String?

    init(key: [UInt8], value: [UInt8]) {
        if let keyText = printableText(key), let valueText = printableText(value) {
            (self.key, self.value, encoding) = (keyText, valueText, nil)
        } else {
            (self.key, self.value, encoding) = (hexText(key), hexText(value), "hex")
        }
    }

    /// The key and value bytes the line stands for. Throws a message for a line no dump
    /// writes (an unknown encoding, or hex that does not parse).
    func bytes() throws -> (key: [UInt8], value: [UInt8]) {
        switch encoding {
        case nil: return (Array(key.utf8), Array(value.utf8))
        case "hex":
            guard let keyBytes = parseHex(key), let valueBytes = parseHex(value) else {
                throw ValidationError("a line with \"encoding\":\"hex\" must give key and value as 0x-prefixed hex")
            }
            return (keyBytes, valueBytes)
        case let other?:
            throw ValidationError("unknown encoding \"\(other)\" (dump writes none, or \"hex\")")
        }
    }
}

struct LoadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Put the keys and values of `dump --json` lines into a store (created if missing).",
        discussion: """
            Reads FILE, or standard input when FILE is - or missing. Changes are committed every 1 MiB; \
            a line that does not read stops the load with its line number, and the lines before it stay loaded.
            """)

    @Argument(help: "A file of `dump --json` lines (- for standard input).")
    var file = "-"

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path, create: true) { opened in
            guard let stream = file == "-" ? fdopen(STDIN_FILENO, "r") : fopen(file, "r") else {
                throw ValidationError("cannot read \(file): \(String(cString: strerror(errno)))")
            }
            defer { if file != "-" { fclose(stream) } }
            let totalBytes = file == "-" ? 0 : (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            var progress = totalBytes >= ProgressReporter.largeStorePages * 4096 && isTerminal(STDERR_FILENO)
                ? ProgressReporter(label: "load", total: totalBytes) : nil
            let decoder = JSONDecoder()
            var batch = WALBatch()
            var batchBytes = 0
            var loaded = 0
            var lineNumber = 0
            var bytesRead = 0
            func commitBatch() throws {
                guard !batch.operations.isEmpty else { return }
                // A dump holds every key, the records' indexes and catalog included, which
                // contexts refuse to write (reserved keys): the tool commits it beneath them.
                try opened.engine.commit(batch)
                loaded += batch.operations.count
                batch = WALBatch()
                batchBytes = 0
                progress?.update(bytesRead)
            }
            try forEachLine(of: stream) { line in
                lineNumber += 1
                bytesRead += line.count + 1
                guard !line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: "\r") })
                else { return }
                let pair: (key: [UInt8], value: [UInt8])
                do { pair = try decoder.decode(DumpLine.self, from: Data(line)).bytes() } catch {
                    throw ValidationError("line \(lineNumber) of \(file == "-" ? "standard input" : file) is not a dump line "
                        + "(\(error)); \(loaded + batch.operations.count == 0 ? "nothing was" : "the lines before it were") loaded")
                }
                batch.put(pair.key, pair.value)
                batchBytes += pair.key.count + pair.value.count
                if batchBytes >= 1 << 20 { try commitBatch() }
            }
            try commitBatch()
            progress?.update(totalBytes)
            print("loaded \(loaded) key(s) into \(store.path), version \(opened.version)")
        }
    }
}

/// Calls `body` with each line of `stream` (without its newline), however long.
func forEachLine(of stream: UnsafeMutablePointer<FILE>, _ body: ([UInt8]) throws -> Void) throws {
    var buffer: UnsafeMutablePointer<CChar>?
    var capacity = 0
    defer { free(buffer) }
    while true {
        let length = getline(&buffer, &capacity, stream)
        guard length >= 0, let buffer else { break }
        var line = Array(UnsafeRawBufferPointer(start: buffer, count: length).bindMemory(to: UInt8.self))
        if line.last == UInt8(ascii: "\n") { line.removeLast() }
        try body(line)
    }
}

struct CheckpointCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint", abstract: "Fold the log into the data file now and release the log segments it covers.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        try withStore(path) { store in
            try store.checkpoint()
            let status = try store.status()
            print("checkpoint at version \(status.checkpointVersion); log: \(status.logSegments.count) segment(s)")
        }
    }
}

struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the store, consistently, to a new directory. Read-only: runs beside a process that writes it.",
        discussion: """
            Beside a live writer the copy holds the newest version that writer had made durable when the backup \
            began (every commit it acknowledged before), and the writer goes on meanwhile. An application backs up \
            a store it has open with `Store.backup(to:)`, which runs beside its commits.
            """)

    @Argument(help: "The new store's directory.")
    var destination: String

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path, mode: .readOnly) { source in
            var progress: ProgressReporter?
            let report = try source.backup(to: destination) { copied, total in
                guard total >= ProgressReporter.largeStorePages * 4096, isTerminal(STDERR_FILENO) else { return }
                if progress == nil { progress = ProgressReporter(label: "backup", total: total) }
                progress?.update(copied)
            }
            print("backed up version \(report.version) to \(destination): \(report.byteCount) bytes")
        }
    }
}

struct CompactCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact", abstract: "Write a new store holding only the live keys (no free pages, no log history).")

    @Argument(help: "The new store's directory.")
    var destination: String

    @Flag(help: "Store the new store's leaves LZ4-compressed where their records do not fit a page raw (EngineOptions.leafCompression).")
    var compressLeaves = false

    @OptionGroup var store: StorePath

    func run() throws {
        var options = EngineOptions()
        if compressLeaves { options.leafCompression = .lz4 }
        try withStore(store.path, mode: .readOnly, options: options) { source in
            let total = try source.read { try $0.scan().count }
            var progress = ProgressReporter(label: "compact", total: total)
            let report = try source.compact(to: destination) { progress.update($0) }
            print("compacted version \(report.version) into \(destination): \(report.keyCount) keys, "
                  + "\(report.byteCount) bytes of data file")
        }
    }
}

struct SalvageCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "salvage",
        abstract: "Recover what a damaged log still holds, into a new store (or in place, when asked).",
        discussion: """
            A store whose log is damaged in the middle does not open: the damage shows that commits once made durable \
            are unreadable. Salvage opens it with a recovery mode that steps over the damage, prints every damage it \
            found (file, offset, LSN, bytes) and every batch it replayed or left out after it, and writes what it \
            recovered as a new store at DESTINATION, leaving the damaged store as it is. Damage is a frame that does \
            not verify or a batch whose frames verify but whose bytes do not decode. Modes: tolerate-tail (cut \
            corruption in the last segment as if it were a torn tail), point-in-time (stop at the first damage \
            anywhere; every batch before it is kept, later segments are ignored), skip-corrupted (keep every batch \
            that verifies and decodes, leaving holes). With --in-place the store itself is opened with the mode \
            and checkpointed, which discards the damaged frames for good.
            """)

    enum Mode: String, ExpressibleByArgument, CaseIterable {
        case tolerateTail = "tolerate-tail"
        case pointInTime = "point-in-time"
        case skipCorrupted = "skip-corrupted"

        var recoveryMode: RecoveryMode {
            switch self {
            case .tolerateTail: .tolerateCorruptedTail
            case .pointInTime: .pointInTime
            case .skipCorrupted: .skipCorrupted
            }
        }
    }

    @Option(help: "How to step over the damage: \(Mode.allCases.map(\.rawValue).joined(separator: ", ")).")
    var mode: Mode

    @Argument(help: "The new store's directory (omit with --in-place).")
    var destination: String?

    @Flag(help: "Salvage the store itself instead of writing a new one: the damaged frames are discarded.")
    var inPlace = false

    @OptionGroup var store: StorePath

    func validate() throws {
        guard inPlace == (destination == nil) else {
            throw ValidationError(inPlace ? "--in-place takes no destination" : "give a destination directory, or --in-place")
        }
    }

    func run() throws {
        var options = EngineOptions()
        options.log.recoveryMode = mode.recoveryMode
        try reportingErrors {
            let source = try openExistingStore(store.path, mode: inPlace ? .readWrite : .readOnly, options: options)
            defer { try? source.close() }
            let damage = source.recoveryReport.log.damage
            for item in damage { print("damage: \(item)") }
            if damage.isEmpty { print("no damage found in the log") }
            // What the log held after the damage: each batch replayed, each one left out.
            for batch in source.recoveryReport.log.batchesAfterDamage { print("after the damage: \(batch)") }
            if inPlace {
                try source.checkpoint()
                try source.close()
                print("salvaged \(store.path) in place at version \(source.version)")
            } else {
                let report = try source.compact(to: destination!)
                print("salvaged version \(report.version) of \(store.path) into \(destination!): \(report.keyCount) keys")
            }
        }
    }
}
