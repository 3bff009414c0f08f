// The processes of the reader bank test (Tests/ContextsTests/ReaderProcessTests.swift):
// one writer moving money between accounts, and readers in processes of their own that
// sum the accounts beside it.
//
//   ReaderBankProcess writer <store> <log> [seconds]   transfer until killed (or for that long)
//   ReaderBankProcess reader <store> <log> <reads>     sum the accounts that many times (2 s at least)
//   ReaderBankProcess backup <store> <log> <copy>      back the live store up into <copy>
//
// The writer opens the store (creating the accounts), logs `opened`, then in each unit of
// work moves an amount between two accounts and adds one to the key `count`; it logs
// `A v` (v the commit's version) once the commit returned, and checkpoints every 200
// transfers. A reader logs `reading` once open and `R first last distinct` after its reads (the versions it saw:
// the first, the last and how many different ones), or `BAD ...` and exits 1 when a sum
// is wrong or a version went backwards. A backup logs `B v` (the copy's version). Every
// line is one write(2), so a kill loses none written.
import Foundation
import Strata

let accounts = 20
let initialBalance = 1_000

func key(_ account: Int) -> [UInt8] { Array("account\(account)".utf8) }
func encode(_ value: Int) -> [UInt8] { withUnsafeBytes(of: Int64(value).littleEndian) { Array($0) } }
func decode(_ bytes: [UInt8]?) -> Int { bytes.map { Int($0.withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }) } ?? 0 }

final class Log: Sendable {
    let handle: FileHandle

    /// Opened for appending: the processes write to one log, each line at its end.
    init(path: String) {
        let descriptor = open(path, O_WRONLY | O_APPEND)
        guard descriptor >= 0 else { fail("cannot open \(path)") }
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    func write(_ line: String) { handle.write(Data((line + "\n").utf8)) }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("ReaderBankProcess: \(message)\n".utf8))
    exit(2)
}

/// The sum of every account at one version, and that version.
func audit(_ store: Store) throws -> (sum: Int, version: UInt64) {
    try store.read { context in
        var sum = 0
        for account in 0..<accounts { sum += decode(try context.get(key(account))) }
        return (sum, context.version)
    }
}

func runWriter(store path: String, log: Log, seconds: Double?) throws {
    let store = try Store.open(path: path)
    if try store.read({ try $0.get(key(0)) }) == nil {
        try store.write { unit in
            for account in 0..<accounts { try unit.put(key(account), encode(initialBalance)) }
        }
    }
    log.write("opened")
    var generator = SystemRandomNumberGenerator()
    let deadline = seconds.map { Date().addingTimeInterval($0) }
    var transfers = 0
    while deadline.map({ Date() < $0 }) ?? true {
        let from = Int.random(in: 0..<accounts, using: &generator)
        let to = (from + Int.random(in: 1..<accounts, using: &generator)) % accounts
        let amount = Int.random(in: 1...50, using: &generator)
        var version: UInt64 = 0
        try store.write { unit in
            let fromBalance = decode(try unit.get(key(from)))
            guard fromBalance >= amount else { return }
            try unit.put(key(from), encode(fromBalance - amount))
            try unit.put(key(to), encode(decode(try unit.get(key(to))) + amount))
            try unit.put(Array("count".utf8), encode(decode(try unit.get(Array("count".utf8))) + 1))
            unit.afterCommit { version = $0.version }
        }
        if version > 0 { log.write("A \(version)") }
        transfers += 1
        if transfers % 200 == 0 { try store.checkpoint() }
    }
    try store.close()
    log.write("closed")
}

func runReader(store path: String, log: Log, reads: Int) throws -> Int32 {
    let store = try Store.open(path: path, mode: .readOnly)
    log.write("reading")
    var first: UInt64?
    var last: UInt64 = 0
    var distinct = 0
    // At least `reads` reads and at least two seconds, so that the writer commits many
    // versions meanwhile however the machine shares its cores.
    let until = Date().addingTimeInterval(2)
    var done = 0
    while done < reads || Date() < until {
        done += 1
        let (sum, version) = try audit(store)
        // A store opened before its first writer's first commit reads version 0, empty:
        // consistent, and no bank yet.
        if version == 0 && last == 0 && sum == 0 { continue }
        guard sum == accounts * initialBalance else {
            log.write("BAD sum \(sum) at version \(version)")
            return 1
        }
        guard version >= last else {
            log.write("BAD version \(version) after \(last)")
            return 1
        }
        if version != last { distinct += 1 }
        first = first ?? version
        last = version
    }
    try store.close()
    log.write("R \(first ?? 0) \(last) \(distinct)")
    return 0
}

@main enum ReaderBankProcess {
    static func main() {
        let arguments = CommandLine.arguments
        guard arguments.count >= 4 else { fail("usage: ReaderBankProcess writer|reader|backup <store> <log> [argument]") }
        let (mode, store, log) = (arguments[1], arguments[2], Log(path: arguments[3]))
        do {
            switch mode {
            case "writer":
                try runWriter(store: store, log: log, seconds: arguments.count > 4 ? Double(arguments[4]) : nil)
            case "reader":
                guard arguments.count > 4, let reads = Int(arguments[4]) else { fail("reader needs a count of reads") }
                exit(try runReader(store: store, log: log, reads: reads))
            case "backup":
                guard arguments.count > 4 else { fail("backup needs a destination") }
                let source = try Store.open(path: store, mode: .readOnly)
                let report = try source.backup(to: arguments[4])
                try source.close()
                log.write("B \(report.version)")
            default:
                fail("unknown mode \(mode)")
            }
        } catch {
            log.write("ERROR \(error)")
            fail("\(error)")
        }
    }
}
