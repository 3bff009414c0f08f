import Foundation
import StrataWAL
import Testing

@Suite struct StrataToolTests {
    @Test func scriptedShellSessionWithNestedContextsCommitAndDiscard() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = """
            put fruit/apple red
            put fruit/banana yellow and ripe
            child
            put fruit/cherry dark red
            del fruit/apple
            child
            put fruit/durian spiky
            discard
            get fruit/durian
            commit
            get fruit/apple
            scan fruit/
            commit
            quit
            """
        let run = try runStrata(["shell", "shop.db"], input: script, in: directory)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.isEmpty)
        #expect(run.lines.dropLast() == [
            "discarded 1 change(s)",
            "(nil)",
            "merged 2 change(s) into depth 0",
            "(nil)",
            "fruit/banana = yellow and ripe",
            "fruit/cherry = dark red",
        ])
        #expect(run.lines.last?.hasPrefix("committed version 1: 3 change(s)") == true)
        // The commit is durable: a new process sees it, and not the discarded or deleted keys.
        let scan = try runStrata(["scan", "--store", "shop.db"], in: directory)
        #expect(scan.lines == ["fruit/banana = yellow and ripe", "fruit/cherry = dark red"])
    }

    @Test func shellReportsErrorsAndExitsNonZeroForAFailedScript() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["shell", "s.db"], input: "put k v\nfrobnicate\ncommit\n", in: directory)
        #expect(run.status != 0)
        #expect(run.stderr.contains("unknown command \"frobnicate\""))
        #expect(run.lines.first?.hasPrefix("committed version 1") == true)
    }

    @Test func oneShotsOnAStoreTheTestMade() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let session = (0..<200).map { "put key\($0) value-\($0)" }.joined(separator: "\n") + "\ncommit\n"
        #expect(try runStrata(["shell", "s.db"], input: session, in: directory).status == 0)
        #expect(try runStrata(["put", "--store", "s.db", "extra", "0x00ff"], in: directory).status == 0)
        #expect(try runStrata(["del", "--store", "s.db", "key7"], in: directory).status == 0)

        let get = try runStrata(["get", "--store", "s.db", "key42"], in: directory)
        #expect(get.status == 0 && get.lines == ["value-42"])
        let missing = try runStrata(["get", "--store", "s.db", "key7"], in: directory)
        #expect(missing.status != 0 && missing.stderr.contains("no value"))

        let dump = try runStrata(["dump", "s.db", "--prefix", "key1", "--json"], in: directory)
        #expect(dump.lines.count == 111 && dump.lines.first == #"{"key":"key1","value":"value-1"}"#)
        let hex = try runStrata(["dump", "s.db", "--prefix", "extra", "--json"], in: directory)
        #expect(hex.lines == [#"{"encoding":"hex","key":"0x6578747261","value":"0x00ff"}"#])

        let checkpoint = try runStrata(["checkpoint", "s.db"], in: directory)
        #expect(checkpoint.status == 0 && checkpoint.stdout.contains("checkpoint at version 3"))
        let stat = try runStrata(["stat", "s.db"], in: directory)
        #expect(stat.status == 0 && stat.stdout.contains("keys: 200 live") && stat.stdout.contains("checkpoint at version 3"))
        let verify = try runStrata(["verify", "s.db"], in: directory)
        #expect(verify.status == 0 && verify.lines.last == "ok")

        let wal = try runStrata(["wal", "s.db", "--json"], in: directory)
        // Lines made by JSONEncoder, keys sorted: decode them rather than match their text.
        struct BatchLine: Decodable, Equatable {
            let lsn: UInt64
            let puts: Int
            let deletes: Int
            let checksum: String
        }
        let batches = wal.lines.compactMap { try? JSONDecoder().decode(BatchLine.self, from: Data($0.utf8)) }
        // Every command closed the store checkpointed, and a checkpointed close shrinks the log
        // back to one empty segment: no batch is left to list.
        #expect(wal.status == 0 && batches.isEmpty, "\(wal.stdout)")
        #expect(wal.lines.last?.contains(#""batches":0"#) == true, "\(wal.stdout)")

        let backup = try runStrata(["backup", "copy.db", "--store", "s.db"], in: directory)
        #expect(backup.status == 0, "\(backup.stderr)")
        let compact = try runStrata(["compact", "small.db", "--store", "s.db"], in: directory)
        #expect(compact.status == 0 && compact.stdout.contains("200 keys"), "\(compact.stderr)")
        for copy in ["copy.db", "small.db"] {
            let copied = try runStrata(["dump", copy], in: directory)
            #expect(copied.lines == (try runStrata(["dump", "s.db"], in: directory)).lines, "\(copy)")
            #expect(try runStrata(["verify", copy], in: directory).status == 0)
        }
    }

    /// `strata wal` counts each batch's puts (inserts among them) and deletes from the
    /// operations it reads in place.
    @Test func walListsEachBatchWithItsPutsAndDeletes() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let logDirectory = directory.appendingPathComponent("log").path
        let (log, _) = try WriteAheadLog.open(directory: logDirectory)
        try log.append(WALBatch([.put(key: [1], value: [1]), .insert(key: [2], value: [2]), .delete(key: [3])]))
        try log.append(WALBatch([.delete(key: [1]), .delete(key: [2])]))
        try log.close()

        let wal = try runStrata(["wal", logDirectory, "--json"], in: directory)
        struct BatchLine: Decodable, Equatable {
            let lsn: UInt64
            let puts: Int
            let deletes: Int
        }
        let batches = wal.lines.compactMap { try? JSONDecoder().decode(BatchLine.self, from: Data($0.utf8)) }
        #expect(wal.status == 0, "\(wal.stderr)")
        #expect(batches == [BatchLine(lsn: 1, puts: 2, deletes: 1), BatchLine(lsn: 2, puts: 0, deletes: 2)], "\(wal.stdout)")
    }

    @Test func verifyOnACorruptedFileExitsNonZeroWithOneLineNamingTheOffset() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let session = (0..<300).map { "put key\($0) \(String(repeating: "v", count: 50))\($0)" }.joined(separator: "\n")
        #expect(try runStrata(["shell", "s.db"], input: session + "\ncommit\n", in: directory).status == 0)
        // Closing checkpointed the keys into pages 2 and up; flip a byte in page 3.
        let data = directory.appendingPathComponent("s.db/data")
        var bytes = try Data(contentsOf: data)
        #expect(bytes.count >= 4 * 4096)
        bytes[3 * 4096 + 100] ^= 0xFF
        try bytes.write(to: data)
        let verify = try runStrata(["verify", "s.db"], in: directory)
        #expect(verify.status != 0)
        let errorLines = verify.stderr.split(separator: "\n")
        #expect(errorLines.count == 1 && errorLines[0].contains("offset 12288"), "\(verify.stderr)")
    }

    @Test func aCutLogTailIsNeverSilent() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for store in ["a.db", "b.db"] {
            for index in 0..<3 {
                #expect(try runStrata(["put", "--store", store, "key\(index)", "value\(index)"], in: directory).status == 0)
            }
            // A torn write at the log's end: a frame header with the segment's salt (FORMAT.md:
            // bytes 12..<16 of the segment header, 4..<8 of a frame header) whose checksum does
            // not verify, just after the last bytes written (the closed store's log is one
            // empty segment).
            let wal = directory.appendingPathComponent("\(store)/wal")
            let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: wal.path)
                .filter { $0.hasPrefix("wal-0") }.sorted().last)
            let url = wal.appendingPathComponent(segment)
            var bytes = try Data(contentsOf: url)
            let end = (try #require(bytes.lastIndex { $0 != 0 }) + 8) / 8 * 8
            bytes.replaceSubrange(end..<(end + 24), with: [UInt8](repeating: 0xA5, count: 24))
            bytes.replaceSubrange((end + 4)..<(end + 8), with: bytes[12..<16])
            try bytes.write(to: url)
        }
        let get = try runStrata(["get", "--store", "a.db", "key0"], in: directory)
        #expect(get.status == 0 && get.lines == ["value0"])
        #expect(get.stderr.contains("recovery: torn tail at offset"), "\(get.stderr)")
        let verify = try runStrata(["verify", "b.db"], in: directory)
        #expect(verify.status != 0)
        #expect(verify.stderr.contains("opening cut") && verify.stderr.contains("may have been acknowledged"), "\(verify.stderr)")
    }

    @Test func secondShellOnAnOpenStoreReportsTheLockAndReadCommandsRunBesideIt() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try runStrata(["put", "--store", "s.db", "k", "v"], in: directory).status == 0)
        // The first shell holds the store open while it waits for input; the answer to its
        // first command shows it has opened the store (and so holds the lock).
        let first = Process()
        first.executableURL = strataExecutable
        first.arguments = ["shell", "s.db"]
        first.currentDirectoryURL = directory
        let input = Pipe()
        let output = Pipe()
        first.standardInput = input
        first.standardOutput = output
        try first.run()
        defer {
            try? input.fileHandleForWriting.close()
            first.waitUntilExit()
        }
        input.fileHandleForWriting.write(Data("put j w\ncommit\nget k\n".utf8))
        var answer = ""
        while !answer.contains("v\n") {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            answer += String(decoding: chunk, as: UTF8.self)
        }
        #expect(answer.hasSuffix("v\n"), "\(answer)")
        let second = try runStrata(["shell", "s.db"], input: "quit\n", in: directory)
        #expect(second.status == 2)
        let holder = "process \(first.processIdentifier) has it open for writing"
        #expect(second.stderr.contains(holder) && second.stderr.contains("s.db"), "\(second.stderr)")
        #expect(second.stderr.split(separator: "\n").count == 1)
        // The read-only commands run beside the shell, on what it committed.
        let get = try runStrata(["get", "j", "--store", "s.db"], in: directory)
        #expect(get.status == 0 && get.stdout == "w\n", "\(get.stderr)")
        let stat = try runStrata(["stat", "s.db"], in: directory)
        #expect(stat.status == 0 && stat.stdout.contains("writer: process \(first.processIdentifier) has it open"), "\(stat.stdout)")
        let verify = try runStrata(["verify", "s.db"], in: directory)
        #expect(verify.status == 0 && verify.stdout.contains("checked version") && verify.stdout.hasSuffix("ok\n"),
                "\(verify.stdout)\(verify.stderr)")
        for command in [["scan", "--store", "s.db"], ["dump", "s.db"], ["backup", "copy.db", "--store", "s.db"]] {
            let run = try runStrata(command, in: directory)
            #expect(run.status == 0, "\(command): \(run.stderr)")
        }
        let copied = try runStrata(["get", "j", "--store", "copy.db"], in: directory)
        #expect(copied.stdout == "w\n", "\(copied.stderr)")
    }

    @Test func getOnAMissingStoreIsOneClearLine() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["get", "--store", "nowhere.db", "k"], in: directory)
        #expect(run.status != 0 && run.stderr.contains("no store at nowhere.db"))
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("nowhere.db").path))
    }
}

@Suite struct CrashTestCommandTests {
    @Test func crashtestPrintsATableAndEndsWithPassedFailed() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["crashtest", "--workload", "bank", "--steps", "20", "--ops", "8", "--kills", "4"], in: directory)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        for suite in ["sim", "recovery", "torn", "errors", "bitflip", "kill"] {
            #expect(run.lines.contains { $0.hasPrefix("| \(suite) ") }, "no row for \(suite)")
        }
        let last = try #require(run.lines.last)
        #expect(last.wholeMatch(of: /[0-9]+ passed, 0 failed/) != nil, "\(last)")
    }

    @Test func crashtestRejectsAnUnknownWorkloadWithOneLine() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["crashtest", "--workload", "nope"], in: directory)
        #expect(run.status != 0 && run.stderr.contains("unknown workload nope"))
    }

    /// The process-kill suite at its CI size: 200 kills of a bank child process.
    @Test func twoHundredProcessKillsLoseNothingAcknowledged() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["crashtest", "--workload", "bank", "--mode", "kill", "--kills", "200", "--json"], in: directory)
        print(run.lines.first ?? "")
        #expect(run.status == 0, "\(run.stdout)")
        #expect(run.lines.last == "201 passed, 0 failed")
    }
}

@Suite struct ConcurrentBankKillTests {
    /// The bank suite's kill cycles at CI size: 50 kills of a child process whose
    /// eight threads transfer concurrently while a reader checks the total.
    @Test func fiftyKillsOfEightConcurrentWritersKeepTheTotal() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["crashtest", "--workload", "bank-concurrent", "--mode", "kill", "--kills", "50", "--json"],
                                in: directory)
        print(run.lines.first ?? "")
        #expect(run.status == 0, "\(run.stdout)")
        #expect(run.lines.last == "51 passed, 0 failed")
    }
}
