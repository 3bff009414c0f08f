// What the subcommands share: where the store is, how an error ends a command (one line
// on stderr and a non-zero exit), and how bytes are shown.
import ArgumentParser
import Strata
import Foundation

/// The store a one-shot command works on.
struct StorePath: ParsableArguments {
    @Option(name: [.customShort("s"), .customLong("store")], help: "The store's directory.")
    var path = StorePath.defaultPath

    static let defaultPath = "./strata.db"
}

/// Runs `body`; any error becomes one line on stderr and exit status 1.
func reportingErrors<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let exit as ExitCode {
        throw exit
    } catch {
        printError("\(error)")
        throw ExitCode.failure
    }
}

/// Writes `strata: message` to stderr.
func printError(_ message: String) {
    FileHandle.standardError.write(Data("strata: \(message)\n".utf8))
}

/// Opens the store at `path` (refusing to create one unless `create`), runs `body` and
/// closes the store, which checkpoints; any error, the close's included, becomes one
/// line on stderr and exit status 1.
func withStore<T>(_ path: String, create: Bool = false, _ body: (Store) throws -> T) throws -> T {
    try reportingErrors {
        let store = create ? try Store.open(path: path) : try openExistingStore(path)
        for line in recoveryWarnings(store.recoveryReport) { printError(line) }
        let result: T
        do { result = try body(store) } catch {
            try? store.close()
            throw error
        }
        try store.close()
        return result
    }
}

/// What opening dropped or stepped over, one line each (empty when recovery found the
/// store whole): every command says so, so a cut log tail is never silent.
func recoveryWarnings(_ report: RecoveryReport) -> [String] {
    var lines = report.log.damage.map { "recovery: \($0)" }
    if let rejected = report.rejectedMeta { lines.append("recovery: \(rejected); the other meta page was used") }
    return lines
}

/// Opens the store at `path`, refusing to create one where none exists.
func openExistingStore(_ path: String) throws -> Store {
    guard FileManager.default.fileExists(atPath: path) else {
        throw ValidationError("no store at \(path) (a store is a directory; `strata shell \(path)` creates one)")
    }
    return try Store.open(path: path)
}

/// Bytes as text when they are printable UTF-8, else as 0x-prefixed hex.
func display(_ bytes: [UInt8]) -> String {
    if let text = String(validating: bytes, as: UTF8.self), text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) {
        return text
    }
    return "0x" + bytes.map { byte in byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }.joined()
}

/// Text typed by a user as bytes: `0x…` is hex, anything else is its UTF-8.
func parseBytes(_ text: String) -> [UInt8] {
    guard text.hasPrefix("0x"), text.count > 2, text.count % 2 == 0 else { return Array(text.utf8) }
    var bytes: [UInt8] = []
    var index = text.index(text.startIndex, offsetBy: 2)
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        guard let byte = UInt8(text[index..<next], radix: 16) else { return Array(text.utf8) }
        bytes.append(byte)
        index = next
    }
    return bytes
}

/// Whether the standard stream `descriptor` is a terminal.
func isTerminal(_ descriptor: Int32) -> Bool { isatty(descriptor) == 1 }

/// Progress of long work: a bar on a terminal, a line per tenth otherwise (on stderr).
struct ProgressReporter {
    let label: String
    let total: Int
    private let onTerminal = isTerminal(STDERR_FILENO)
    private var lastTenth = -1

    init(label: String, total: Int) {
        self.label = label
        self.total = max(total, 1)
    }

    mutating func update(_ done: Int) {
        let fraction = min(Double(done) / Double(total), 1)
        if onTerminal {
            let filled = Int(fraction * 30)
            let bar = String(repeating: "#", count: filled) + String(repeating: " ", count: 30 - filled)
            FileHandle.standardError.write(Data("\r\(label) [\(bar)] \(Int(fraction * 100))%".utf8))
            if done >= total { FileHandle.standardError.write(Data("\n".utf8)) }
        } else {
            let tenth = Int(fraction * 10)
            guard tenth > lastTenth else { return }
            lastTenth = tenth
            FileHandle.standardError.write(Data("\(label): \(tenth * 10)%\n".utf8))
        }
    }
}

/// `value` as one line of JSON, made by `JSONEncoder` (keys in snake_case, sorted, so lines
/// are stable): every JSON the tool prints goes through here.
func jsonLine(_ value: some Encodable) throws -> String {
    let encoder = JSONEncoder()
    encoder.keyEncodingStrategy = .convertToSnakeCase
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}
