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

/// The tool's exit statuses (listed in `strata --help`).
enum ExitStatus {
    /// The answer is no: `get` found no value, `verify` found damage.
    static let no = ExitCode(1)
    /// An error: the store could not be opened, read or written, a script's command failed
    /// or a script ended with changes it never committed. The message is on stderr.
    static let error = ExitCode(2)

    static let help = """
        Exit status: 0 success; 1 the answer is no (`get` found no value, `verify` found damage); \
        2 an error (the store could not be opened, read or written, a shell script's command failed \
        or the script ended with uncommitted changes), with the message on stderr; 64 a usage error.
        """
}

/// Runs `body`; any error becomes one line on stderr and exit status 2.
func reportingErrors<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let exit as ExitCode {
        throw exit
    } catch {
        printError("\(error)")
        throw ExitStatus.error
    }
}

/// Writes `strata: message` to stderr.
func printError(_ message: String) {
    FileHandle.standardError.write(Data("strata: \(message)\n".utf8))
}

/// Opens the store at `path` (refusing to create one unless `create`), runs `body` and
/// closes the store, which checkpoints a writer's new commits (a `.readOnly` store writes
/// nothing); any error becomes one line on stderr and exit status 2. A close that fails
/// after `body` committed is a warning, not an error: the commits are durable in the log
/// (a commit returns only then) and the next open replays them, so the exit status says
/// the command did what it printed.
func withStore<T>(_ path: String, mode: AccessMode = .readWrite, create: Bool = false, options: EngineOptions = EngineOptions(),
                  _ body: (Store) throws -> T) throws -> T {
    try reportingErrors {
        let store = create ? try Store.open(path: path, options: options) : try openExistingStore(path, mode: mode, options: options)
        for line in recoveryWarnings(store.recoveryReport) { printError(line) }
        let openedAt = store.version
        let result: T
        do { result = try body(store) } catch {
            try? store.close()
            throw error
        }
        do { try store.close() } catch where store.version > openedAt {
            printError("warning: version \(store.version) is committed and durable in the log, but the checkpoint at close "
                       + "failed: \(error) The next open replays the log; nothing committed is lost.")
        }
        return result
    }
}

/// What opening dropped or stepped over, one line each (empty when recovery found the
/// store whole): every command says so, so a cut log tail is never silent.
func recoveryWarnings(_ report: RecoveryReport) -> [String] {
    var lines = report.log.damage.map { "recovery: \($0)" }
    if report.log.damage.contains(where: \.mayHaveLostCommits) {
        lines.append("recovery: a commit that was acknowledged may be missing (a torn tail is normally a write that "
                     + "a crash interrupted before it was acknowledged)")
    }
    if let rejected = report.rejectedMeta { lines.append("recovery: \(rejected); the other meta page was used") }
    return lines
}

/// Opens the store at `path`, refusing to create one where none exists.
func openExistingStore(_ path: String, mode: AccessMode = .readWrite, options: EngineOptions = EngineOptions()) throws -> Store {
    guard FileManager.default.fileExists(atPath: path) else {
        throw ValidationError("no store at \(path) (a store is a directory; `strata shell \(path)` creates one)")
    }
    return try Store.open(path: path, mode: mode, options: options)
}

/// Bytes as text when they are printable UTF-8, else as 0x-prefixed hex.
func display(_ bytes: [UInt8]) -> String {
    printableText(bytes) ?? hexText(bytes)
}

/// The bytes as a string when they are UTF-8 without control characters.
func printableText(_ bytes: [UInt8]) -> String? {
    guard let text = String(validating: bytes, as: UTF8.self),
          text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else { return nil }
    return text
}

/// The bytes as `0x`-prefixed lowercase hex.
func hexText(_ bytes: [UInt8]) -> String {
    "0x" + bytes.map { byte in byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }.joined()
}

/// Text typed by a user as bytes: `0x…` with at least one byte is hex, anything else
/// (`0x` alone included) is its UTF-8.
func parseBytes(_ text: String) -> [UInt8] {
    (text.utf8.count > 2 ? parseHex(text) : nil) ?? Array(text.utf8)
}

/// The bytes of `0x`-prefixed hex (`0x` alone is no bytes), or nil when `text` is not that.
func parseHex(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count >= 2, digits.count % 2 == 0, digits[0] == UInt8(ascii: "0"), digits[1] == UInt8(ascii: "x") else {
        return nil
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(digits.count / 2 - 1)
    for index in stride(from: 2, to: digits.count, by: 2) {
        guard let high = hexDigit(digits[index]), let low = hexDigit(digits[index + 1]) else { return nil }
        bytes.append(high << 4 | low)
    }
    return bytes
}

private func hexDigit(_ character: UInt8) -> UInt8? {
    switch character {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
    default: nil
    }
}

/// Whether the standard stream `descriptor` is a terminal.
func isTerminal(_ descriptor: Int32) -> Bool { isatty(descriptor) == 1 }

/// Progress of long work: a bar on a terminal, a line per tenth otherwise (on stderr).
struct ProgressReporter {
    let label: String
    let total: Int
    private let onTerminal = isTerminal(STDERR_FILENO)
    private var lastTenth = -1

    /// Work on stores of at least this many pages (64 MiB of 4 KiB pages) shows progress.
    static let largeStorePages = 16_384

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
