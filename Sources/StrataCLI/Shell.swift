// The interpreter behind `strata shell`: a stack of contexts over one store, driven one
// line at a time. On a terminal it prompts with the context depth and explains what it
// did; otherwise it prints only results, so scripts can pipe commands in.
//
// Invariants:
//  Shell.S1. `contexts` is never empty: its first element is a root context, each later one a
//      child of the one before; commands act on the last.
import Strata
import Foundation

final class Shell {
    let store: Store
    let interactive: Bool
    private(set) var contexts: [Context]
    /// Whether any command failed (the exit status of a script says so).
    private(set) var failed = false
    private(set) var finished = false

    init(store: Store, interactive: Bool) {
        self.store = store
        self.interactive = interactive
        contexts = [store.makeContext()]
    }

    var prompt: String { contexts.count == 1 ? "strata> " : "strata[\(contexts.count - 1)]> " }

    static let help = """
        put KEY VALUE    stage VALUE (the rest of the line) under KEY
        get KEY          show KEY's value as this context sees it
        del KEY          stage the removal of KEY
        scan [PREFIX]    list keys (starting with PREFIX) and values in key order
        child            open a child of the current context
        commit           merge the current context into its parent, or commit the root durably
        discard          drop the current context's changes (a child is closed)
        stats            the store's version, checkpoint, pages and log
        help             this list
        quit             leave (asks whether to commit staged changes; a script that leaves
                         changes uncommitted ends with exit status 2)
        Keys and values are text; write 0x… for raw bytes.
        """

    /// Runs one line; prints results to stdout and errors to stderr.
    func execute(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, !trimmed.hasPrefix("#") else { return }
        let (command, rest) = split(trimmed)
        do {
            try run(command.lowercased(), rest)
        } catch {
            failed = true
            printError("\(error)")
        }
    }

    private func run(_ command: String, _ rest: String) throws {
        let context = contexts[contexts.count - 1]
        switch command {
        case "put", "set":
            let (key, value) = split(rest)
            guard !key.isEmpty else { throw ShellError.usage("put KEY VALUE") }
            try context.put(parseBytes(key), parseBytes(value))
        case "get":
            guard !rest.isEmpty else { throw ShellError.usage("get KEY") }
            print(try context.get(parseBytes(rest)).map(display) ?? "(nil)")
        case "del", "delete":
            guard !rest.isEmpty else { throw ShellError.usage("del KEY") }
            try context.delete(parseBytes(rest))
        case "scan":
            let pairs = try context.scan(prefix: parseBytes(rest))
            for (key, value) in pairs { print("\(display(key)) = \(display(value))") }
            if interactive { print("(\(pairs.count) key(s))") }
        case "child", "begin":
            contexts.append(try context.makeChild())
            if interactive { print("opened a child context (depth \(contexts.count - 1))") }
        case "commit":
            try commit(context)
        case "discard", "rollback":
            let count = context.changeCount
            context.discard()
            if contexts.count > 1 { contexts.removeLast() } else { contexts[0] = store.makeContext() }
            print("discarded \(count) change(s)")
        case "stats", "stat":
            for line in try statusLines(store) { print(line) }
        case "help", "?":
            print(Self.help)
        case "quit", "exit":
            finished = true
        default:
            throw ShellError.unknownCommand(command)
        }
    }

    private func commit(_ context: Context) throws {
        let staged = context.changeCount
        let receipt: CommitReceipt
        do { receipt = try context.commit() } catch {
            // A failed root commit ends its context: start a fresh one, so the commands
            // after this report their own outcome, not "already discarded".
            if context.status != .open {
                if contexts.count > 1 { contexts.removeLast() } else { contexts[0] = store.makeContext() }
                throw ShellError.commitFailed(cause: "\(error)", dropped: staged)
            }
            throw error
        }
        if contexts.count > 1 {
            contexts.removeLast()
            print("merged \(receipt.changeCount) change(s) into depth \(contexts.count - 1)")
        } else {
            contexts[0] = store.makeContext()
            print("committed version \(receipt.version): \(receipt.changeCount) change(s), "
                  + "\(receipt.rawByteCount) bytes logged as \(receipt.storedByteCount)")
        }
    }

    /// Changes staged in the open contexts and not yet committed to the store.
    var pendingChangeCount: Int { contexts.reduce(0) { $0 + $1.changeCount } }

    /// Ends the session: commits what is staged when `committing` (each child into its
    /// parent, then the root durably), drops it otherwise. Returns how many staged changes
    /// were dropped (0 after a successful commit).
    func finish(committing: Bool) -> Int {
        finished = true
        if committing && pendingChangeCount > 0 {
            do {
                while contexts.count > 1 { try commit(contexts[contexts.count - 1]) }
                try commit(contexts[0])
            } catch {
                failed = true
                printError("\(error)")
            }
        }
        let dropped = pendingChangeCount
        contexts[0].discard()
        return dropped
    }

    /// The first word of `text` (or a "quoted phrase") and the rest, trimmed.
    private func split(_ text: String) -> (String, String) {
        if text.hasPrefix("\""), let close = text.dropFirst().firstIndex(of: "\"") {
            let word = String(text[text.index(after: text.startIndex)..<close])
            return (word, String(text[text.index(after: close)...]).trimmingCharacters(in: .whitespaces))
        }
        guard let space = text.firstIndex(where: { $0 == " " || $0 == "\t" }) else { return (text, "") }
        return (String(text[..<space]), String(text[space...]).trimmingCharacters(in: .whitespaces))
    }
}

enum ShellError: Error, CustomStringConvertible {
    case usage(String)
    case unknownCommand(String)
    case commitFailed(cause: String, dropped: Int)

    var description: String {
        switch self {
        case let .usage(form): "usage: \(form)"
        case let .unknownCommand(command): "unknown command \"\(command)\"; type help for the list"
        case let .commitFailed(cause, dropped):
            "\(cause) The commit's \(dropped) staged change(s) were dropped; later commands start a new context."
        }
    }
}

/// The lines of `stats` and `strata stat`.
func statusLines(_ store: Store) throws -> [String] {
    let status = try store.status()
    let log = store.logStatistics
    return [
        "version \(status.version), checkpoint at version \(status.checkpointVersion)",
        "data file: \(status.pageCount) pages of \(status.pageBytes) bytes, tree height \(status.treeHeight)",
        "memtable: \(status.memtableKeys) key(s), \(status.memtableBytes) bytes not yet checkpointed",
        "log: \(status.logSegments.count) segment(s), \(status.logBytes) bytes on disk; this session: "
            + "\(log.groupCount) group commit(s), \(log.syncCount) fdatasync(s)",
    ] + readerLines(status)
}

/// Who else has the store open: its writer (seen from a reader) and its readers.
func readerLines(_ status: StoreStatus) -> [String] {
    var lines: [String] = []
    if let writer = status.writerProcess, writer != ProcessInfo.processInfo.processIdentifier {
        lines.append("writer: process \(writer) has it open; this reads version \(status.version), the newest it made durable")
    }
    if !status.readers.isEmpty {
        lines.append("readers: \(status.readers.count) other open; \(status.pagesHeldForReaders) freed page(s) wait for readers of older trees")
        for reader in status.readers {
            lines.append("  process \(reader.process) reads version \(reader.version)"
                         + (reader.generation.map { ", tree generation \($0)" } ?? ""))
        }
    }
    return lines
}
