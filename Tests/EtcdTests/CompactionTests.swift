// A store whose watch comes back after etcd compacted the revisions it missed: it cannot
// resume, so it reloads its replica at etcd's current revision and watches from there.
// The store reaches etcd through a relay the test cuts (StrataTesting's TCPRelay), so its
// watch ends while another store writes and etcd compacts.
import Foundation
import Strata
@testable import StrataEtcd
import StrataTesting
import TestBackends
import Testing

extension EtcdStoreTests {
    @Test func aStoreWhoseMissedRevisionsWereCompactedReloadsItsReplica() async throws {
        // A server of its own: compacting the shared one would touch the other tests' stores.
        let server = try EtcdServer.start()
        defer { server.stop() }
        let serverPort = try #require(UInt16(server.endpoint.split(separator: ":").last ?? ""))
        let relay = try TCPRelay(to: serverPort)
        defer { relay.close() }
        let prefix = "compacted-\(UUID().uuidString)/"
        let watcher = try await Store.open(etcd: ["http://127.0.0.1:\(relay.port)"], prefix: prefix, options: EtcdServer.options)
        defer { try? watcher.close() }
        let writer = try await Store.open(etcd: [server.endpoint], prefix: prefix, options: EtcdServer.options)
        defer { try? writer.close() }
        try await writer.write { unit in
            try unit.put(bytes("kept"), bytes("1"))
            try unit.put(bytes("changed"), bytes("1"))
            try unit.put(bytes("deleted"), bytes("1"))
        }
        #expect(try await eventually { try watcher.read { try $0.get(bytes("deleted")) } == bytes("1") })

        // The watcher's connections drop; meanwhile the prefix changes and etcd compacts.
        relay.cut()
        try await writer.write { unit in
            try unit.put(bytes("changed"), bytes("2"))
            try unit.delete(bytes("deleted"))
            try unit.put(bytes("created"), bytes("1"))
        }
        try await writer.write { unit in try unit.put(bytes("changed"), bytes("3")) }
        let revision = try etcdCall(port: serverPort, "/v3/kv/range", #"{"key":"AA=="}"#)
        let current = try #require(((revision["header"] as? [String: Any])?["revision"] as? String).flatMap { Int64($0) })
        _ = try etcdCall(port: serverPort, "/v3/kv/compaction", #"{"revision":"\#(current)","physical":true}"#)
        #expect(try await watcher.read { try $0.get(bytes("changed")) } == bytes("1"), "the watcher saw a change through a cut relay")

        // Back in touch, the watch finds its revision compacted and the replica reloads.
        try relay.restore()
        #expect(try await eventually { try watcher.read { try $0.get(bytes("changed")) } == bytes("3") })
        let pairs = try await watcher.read { try $0.scan() }
        #expect(pairs.map { String(decoding: $0.key, as: UTF8.self) } == ["changed", "created", "kept"])
        // And it follows etcd again from there.
        try await writer.write { unit in try unit.put(bytes("after"), bytes("1")) }
        #expect(try await eventually { try watcher.read { try $0.get(bytes("after")) } == bytes("1") })
        try await watcher.write { unit in try unit.put(bytes("kept"), bytes("2")) }
        #expect(try await eventually { try writer.read { try $0.get(bytes("kept")) } == bytes("2") })
    }

    @Test func aStoreCompactsEtcdsHistoryButKeepsWhatAStoreOfItsProcessNeedsToResume() async throws {
        let server = try EtcdServer.start()
        defer { server.stop() }
        let serverPort = try #require(UInt16(server.endpoint.split(separator: ":").last ?? ""))
        let relay = try TCPRelay(to: serverPort)
        defer { relay.close() }
        let prefix = "compacting-\(UUID().uuidString)/"
        var options = EtcdServer.options
        options.compaction = EtcdCompaction(retainedRevisions: 3, retention: .zero, interval: .milliseconds(100))
        let lagging = try await Store.open(etcd: ["http://127.0.0.1:\(relay.port)"], prefix: prefix, options: EtcdServer.options)
        var laggingOpen = true
        defer { if laggingOpen { try? lagging.close() } }
        let compacting = try await Store.open(etcd: [server.endpoint], prefix: prefix, options: options)
        defer { try? compacting.close() }
        for index in 0..<5 { try await compacting.write { unit in try unit.put(bytes("k"), bytes("\(index)")) } }
        #expect(try await eventually { try lagging.read { try $0.get(bytes("k")) } == bytes("4") })

        // The lagging store's watch is cut at revision `cut`: it will resume from `cut` + 1.
        let cut = try currentRevision(port: serverPort)
        relay.cut()
        // Its watch has ended: it waits to resume from `cut` + 1.
        #expect(try await eventually { EtcdCompactor.pendingNeeds.contains(cut + 1) })
        for index in 5..<25 { try await compacting.write { unit in try unit.put(bytes("k"), bytes("\(index)")) } }
        let latest = try currentRevision(port: serverPort)
        // History below `cut` + 1 goes; from there on it stays while the lagging store is open.
        #expect(try await eventually { isCompacted(port: serverPort, revision: cut) })
        try await Task.sleep(for: .milliseconds(500))
        #expect(!isCompacted(port: serverPort, revision: cut + 1), "compacted what an open store needs to resume from")
        try relay.restore()
        #expect(try await eventually { try lagging.read { try $0.get(bytes("k")) } == bytes("24") })
        // Once it is closed (or has caught up), compaction goes on to the retention floor.
        try lagging.close()
        laggingOpen = false
        #expect(try await eventually { isCompacted(port: serverPort, revision: latest - 4) })
        #expect(!isCompacted(port: serverPort, revision: latest - 2), "compacted within the retained revisions")
        #expect(try await compacting.read { try $0.get(bytes("k")) } == bytes("24"))
    }

    func currentRevision(port: UInt16) throws -> Int64 {
        let answer = try etcdCall(port: port, "/v3/kv/range", #"{"key":"AA=="}"#)
        return try #require(((answer["header"] as? [String: Any])?["revision"] as? String).flatMap { Int64($0) })
    }

    /// Whether etcd refuses a read at `revision` as compacted.
    func isCompacted(port: UInt16, revision: Int64) -> Bool {
        do {
            _ = try etcdCall(port: port, "/v3/kv/range", #"{"key":"AA==","revision":"\#(revision)"}"#)
            return false
        } catch {
            return "\(error)".contains("compacted")
        }
    }

    /// One call to etcd's JSON gateway on 127.0.0.1, its answer's JSON object.
    func etcdCall(port: UInt16, _ path: String, _ body: String) throws -> [String: Any] {
        let socket = try TCPRelay.connect(port: port)
        defer { Glibc.close(socket) }
        let request = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        var bytes = Array(request.utf8)
        guard Glibc.send(socket, &bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { throw NetworkError("send failed") }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = Glibc.recv(socket, &buffer, buffer.count, 0)
            if count <= 0 { break }
            answer += buffer[0..<count]
        }
        let text = String(decoding: answer, as: UTF8.self)
        guard text.hasPrefix("HTTP/1.1 200"), let start = text.range(of: "\r\n\r\n")?.upperBound,
              let object = try JSONSerialization.jsonObject(with: Data(text[start...].utf8)) as? [String: Any] else {
            throw NetworkError("etcd answered \(path) with \(text.prefix(2_000))")
        }
        return object
    }
}
