// The readers of `readwhilewriting`: threads in the writer's process and, for the engines
// whose stores other processes can read, processes of this executable. They start idle,
// read random keys (each read seeing the newest commit) between `resume()` and `pause()`,
// and are idle again once `pause()` returns. An idle thread holds nothing of the store; a
// process keeps its store open (attached, reading nothing), because opening it again
// replays the log, up to a memtable's worth: while a process did, the writer's commits
// waited for it and its checkpoint ran on alone, which made the phase after each such
// pause 1.3 × faster than the rest. An idle process reads nothing of the log either: when
// told to read it first replays what the writer committed meanwhile, before it answers
// and so before the writer's next phase starts. Replayed inside that phase, it made each
// phase with readers carry, on average, the replay of a phase without them besides its own.
//
// With `--interleave K` the writer commits in phases of K keys and the readers read in
// every other phase, so that its rate with readers and its rate without them come from the
// same run, the same store and the same minute. Measured in two runs (`overwrite`, then
// `readwhilewriting`), the writer's rate alone moved by half from one run to the next on
// this machine, and the ratio with it.
import Foundation
import Histogram
import Strata
@_spi(StorageEngine) import StrataTesting
import Synchronization

/// The readers beside one writer.
final class ReadersBesideWriter {
    private let engine: String
    private let threads: Threads
    private let group = DispatchGroup()
    private let processes: [ReaderProcessHandle]

    /// What the reader threads share with the writer's thread.
    private final class Threads: Sendable {
        let handles: UncheckedReaders
        let reading = Atomic(false)
        let stopping = Atomic(false)
        /// Threads that saw `reading` clear and read no more.
        let parked = Atomic(0)
        let reads = Atomic(0)
        let failure = Mutex<String?>(nil)

        init(_ handles: UncheckedReaders) { self.handles = handles }
    }

    /// Starts `options.readers` threads on `bench` and `options.readerProcesses` processes
    /// on the store in `directory` (Strata's and SQLite's), all idle; each read is of one
    /// of `keys` keys, which must all exist, and its latency goes to `latencies`.
    init(_ bench: any BenchEngine, engine: String, directory: String, keys: Int, options: StrataBench,
         latencies: LatencyRecorder) throws {
        self.engine = engine
        var handles: [any BenchReader] = []
        var started: [ReaderProcessHandle] = []
        do {
            for _ in 0..<options.readers { handles.append(try bench.makeReader()) }
            let path: String? = switch engine {
            case "strata", "strata-relaxed", "strata-lz4", "strata-small": directory
            case "sqlite": directory + "/sqlite.db"
            default: nil
            }
            if let path {
                for index in 0..<options.readerProcesses {
                    started.append(try ReaderProcessHandle(engine: engine, path: path, keys: keys, seed: UInt64(index + 1),
                                                           options: options))
                }
            }
        } catch {
            for handle in handles { handle.close() }
            for process in started { _ = try? process.finish() }
            throw error
        }
        threads = Threads(UncheckedReaders(handles))
        processes = started
        for thread in 0..<options.readers {
            group.enter()
            let (split, shared, group) = (options.splitCPUs, threads, group)
            Thread.detachNewThread {
                defer { group.leave() }
                if split { CPUSplit.pin(readers: true) }
                let reader = shared.handles.readers[thread]
                var random = SplitMix64(seed: UInt64(thread) &+ 977)
                var histogram = Histogram<UInt64>.latencies()
                defer { latencies.add(histogram) }
                var done = 0
                defer { shared.reads.add(done, ordering: .relaxed) }
                while !shared.stopping.load(ordering: .acquiring) {
                    guard shared.reading.load(ordering: .acquiring) else {
                        shared.parked.add(1, ordering: .releasing)
                        while !shared.reading.load(ordering: .acquiring) && !shared.stopping.load(ordering: .acquiring) {
                            usleep(100)
                        }
                        shared.parked.subtract(1, ordering: .releasing)
                        continue
                    }
                    let key = Int(random.next() % UInt64(keys))
                    let before = monotonicNanoseconds()
                    do {
                        guard try reader.read(key) else {
                            shared.failure.withLock { $0 = "key \(key) was not found" }
                            break
                        }
                    } catch {
                        shared.failure.withLock { $0 = "\(error)" }
                        break
                    }
                    _ = histogram.record(monotonicNanoseconds() - before)
                    done += 1
                }
                // A thread that failed counts as parked, so that `pause()` never waits for it.
                if !shared.stopping.load(ordering: .acquiring) { shared.parked.add(1, ordering: .releasing) }
            }
        }
        try waitUntilParked()
    }

    /// Every reader reads from now on.
    func resume() throws {
        try checkFailure()
        for process in processes { try process.send("read", expecting: "reading") }
        threads.reading.store(true, ordering: .releasing)
    }

    /// Every reader stops reading.
    func pause() throws {
        threads.reading.store(false, ordering: .releasing)
        try waitUntilParked()
        for process in processes { try process.send("pause", expecting: "paused") }
    }

    /// Ends every reader; returns the threads' reads and the processes' reads a second of
    /// the time each spent reading, summed over the processes.
    func finish() throws -> (threadReads: Int, processReadsPerSecond: Double) {
        threads.stopping.store(true, ordering: .releasing)
        group.wait()
        for handle in threads.handles.readers { handle.close() }
        // Every process is ended and waited for, the first failure reported after.
        var perSecond = 0.0
        var firstFailure: (any Error)?
        for process in processes {
            do { perSecond += try process.finish() } catch { firstFailure = firstFailure ?? error }
        }
        if let firstFailure { throw firstFailure }
        try checkFailure()
        return (threads.reads.load(ordering: .relaxed), perSecond)
    }

    var hasProcesses: Bool { !processes.isEmpty }

    private func waitUntilParked() throws {
        while threads.parked.load(ordering: .acquiring) < threads.handles.readers.count {
            try checkFailure()
            usleep(100)
        }
    }

    private func checkFailure() throws {
        if let message = threads.failure.withLock({ $0 }) { throw BenchError(description: "\(engine) readwhilewriting: \(message)") }
    }
}

/// The reader handles of `readwhilewriting`, each used by one thread only.
final class UncheckedReaders: @unchecked Sendable {
    let readers: [any BenchReader]
    init(_ readers: [any BenchReader]) { self.readers = readers }
}

/// The parent's end of a reader process: commands one a line on its standard input, each
/// answered by a line on its standard output.
private final class ReaderProcessHandle {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffered = Data()

    init(engine: String, path: String, keys: Int, seed: UInt64, options: StrataBench) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = ["--read-process", engine, "--read-path", path, "--num", "\(keys)", "--seed", "\(seed)"]
            + (options.splitCPUs ? ["--split-cpus"] : [])
            + options.memoryArguments
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        try expect("ready")
    }

    func send(_ command: String, expecting answer: String) throws {
        try input.fileHandleForWriting.write(contentsOf: Data((command + "\n").utf8))
        try expect(answer)
    }

    /// Closes the process's input, which ends it, and waits for it; returns its reads a
    /// second of reading.
    func finish() throws -> Double {
        try? input.fileHandleForWriting.close()
        let text = (try? line()) ?? ""
        process.waitUntilExit()
        let fields = text.split(separator: " ")
        guard process.terminationStatus == 0, fields.count == 2, let reads = Int(fields[0]), let seconds = Double(fields[1]) else {
            throw BenchError(description: "a reader process failed: \(text)")
        }
        return seconds > 0 ? Double(reads) / seconds : 0
    }

    private func expect(_ answer: String) throws {
        let said = try line()
        guard said == answer else { throw BenchError(description: "a reader process said \(said), not \(answer)") }
    }

    private func line() throws -> String {
        while true {
            if let end = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffered[..<end], as: UTF8.self)
                buffered.removeSubrange(...end)
                return line
            }
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else {
                let said = buffered.isEmpty ? "" : ": " + String(decoding: buffered, as: UTF8.self)
                throw BenchError(description: "a reader process ended" + said)
            }
            buffered += chunk
        }
    }
}

/// A reader process of `readwhilewriting` (`--read-process`): opens the store beside the
/// writer in its parent and says `ready`, then, after each `read`, catches up with the
/// writer (`BenchReader.catchUp`), answers `reading` and reads random keys until `pause`
/// (answered `paused`). When its input closes it closes the store and prints the reads
/// made and the seconds spent reading.
struct ReadProcess {
    let engine: String
    let path: String
    let keys: Int
    let seed: UInt64

    private enum Command: Int { case pause, read, stop }

    func run() throws {
        let wanted = Atomic(Command.pause.rawValue)
        Thread.detachNewThread {
            var buffered = Data()
            while true {
                let chunk = FileHandle.standardInput.availableData
                guard !chunk.isEmpty else { break }
                buffered += chunk
                while let end = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                    let command = String(decoding: buffered[..<end], as: UTF8.self)
                    buffered.removeSubrange(...end)
                    wanted.store(command == "read" ? Command.read.rawValue : Command.pause.rawValue, ordering: .releasing)
                }
            }
            wanted.store(Command.stop.rawValue, ordering: .releasing)
        }
        let (reader, store) = try openReader()
        let say = { (line: String) in FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
        say("ready")
        var random = SplitMix64(seed: seed &* 7919)
        var (reads, nanoseconds, since, isReading) = (0, UInt64(0), UInt64(0), false)
        while true {
            switch Command(rawValue: wanted.load(ordering: .acquiring)) {
            case .read:
                if !isReading {
                    // Caught up before it says so, and before the writer's phase starts:
                    // what the writer committed while this process was idle is replayed
                    // here, not in the phase it reads in (where a process that read all
                    // along would have replayed only that phase's commits).
                    try reader.catchUp()
                    (isReading, since) = (true, monotonicNanoseconds())
                    say("reading")
                }
                let key = Int(random.next() % UInt64(keys))
                guard try reader.read(key) else { throw BenchError(description: "key \(key) was not found") }
                reads += 1
            case let command:
                if isReading {
                    (isReading, nanoseconds) = (false, nanoseconds + monotonicNanoseconds() - since)
                    if command == .pause { say("paused") }
                }
                guard command != .stop else {
                    reader.close()
                    try store?.close()
                    say("\(reads) \(Double(nanoseconds) / 1e9)")
                    return
                }
                usleep(100)
            }
        }
    }

    private func openReader() throws -> (reader: any BenchReader, store: Store?) {
        switch engine {
        case "strata", "strata-relaxed", "strata-lz4", "strata-small":
            let store = try Store.open(path: path, mode: .readOnly, options: Workload.strataOptions(engine: engine))
            return (StrataReader(engine: store.storageEngine), store)
        case "sqlite":
            return (try SQLiteReader(path: path), nil)
        default:
            throw BenchError(description: "no reader process for \(engine)")
        }
    }
}
