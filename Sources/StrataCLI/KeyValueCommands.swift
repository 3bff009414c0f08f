// One-shot reads and writes: get, put, del, scan. Each write is one durable commit.
import ArgumentParser
import Strata

struct GetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Print a key's value (exit status 1 when it has none). Read-only.")

    @Argument(help: "The key (0x… for raw bytes).")
    var key: String

    @Flag(help: "The key and value as one JSON object (as `dump --json` writes them).")
    var json = false

    @OptionGroup var store: StorePath

    func run() throws {
        let key = parseBytes(key)
        let value = try withStore(store.path, mode: .readOnly) { opened in
            return try opened.read { try $0.get(key) }
        }
        guard let value else {
            printError("\(display(key)) has no value")
            throw ExitStatus.no
        }
        print(json ? try jsonLine(DumpLine(key: key, value: value)) : display(value))
    }
}

struct PutCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "put", abstract: "Store a value under a key (one durable commit).")

    @Argument(help: "The key (0x… for raw bytes).")
    var key: String

    @Argument(help: "The value (0x… for raw bytes).")
    var value: String

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path, create: true) { opened in
            try opened.write { try $0.put(parseBytes(key), parseBytes(value)) }
            print("committed version \(opened.version)")
        }
    }
}

struct DeleteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "del", abstract: "Remove a key (one durable commit).")

    @Argument(help: "The key (0x… for raw bytes).")
    var key: String

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path) { opened in
            try opened.write { try $0.delete(parseBytes(key)) }
            print("committed version \(opened.version)")
        }
    }
}

struct ScanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "scan", abstract: "List keys and values in key order. Read-only.")

    @Argument(help: "Only keys starting with this prefix.")
    var prefix = ""

    @Option(help: "At most this many keys.")
    var limit = Int.max

    @Flag(help: "Descending key order.")
    var reverse = false

    @Flag(help: "One JSON object per key (as `dump --json` writes them).")
    var json = false

    @OptionGroup var store: StorePath

    func run() throws {
        try withStore(store.path, mode: .readOnly) { opened in
            let pairs = try opened.read { try $0.scan(prefix: parseBytes(prefix), reverse: reverse, limit: limit) }
            for (key, value) in pairs {
                print(json ? try jsonLine(DumpLine(key: key, value: value)) : "\(display(key)) = \(display(value))")
            }
        }
    }
}
