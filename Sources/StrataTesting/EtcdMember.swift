// How the etcd processes of tests are run, and made sure to end: `etcd` from the system
// (Debian: etcd-server, installed by scripts/bootstrap) under a small shell wrapper that
// records its pid and kills it once the process that started it is gone, even when that
// process crashes. When the starting process exits normally, an exit handler kills every
// member still running and waits until each has exited and its wrapper has reaped it, so
// no member outlives a test run holding its ports.
import CStrataPlatform
import Foundation
import Synchronization

/// One etcd process, with its wrapper.
final class EtcdMember: Sendable {
    private let wrapper: pid_t
    private let etcd = Atomic<Int32>(0)
    /// Whether the wrapper has exited and been reaped.
    private let exited = Mutex(false)

    /// etcd's pid.
    var pid: Int32 { etcd.load(ordering: .relaxed) }

    private static let live = Mutex<[ObjectIdentifier: EtcdMember]>([:])
    /// Directories removed at exit, once every member has exited (clusters' directories).
    private static let directories = Mutex<Set<String>>([])
    private static let exitHandler: Void = { atexit { EtcdMember.stopAll() } }()

    /// Starts `arguments` (etcd and its flags), writing its output to `log`, and returns
    /// once `port` accepts connections. `removing` is a directory the wrapper deletes after
    /// etcd exits.
    init(arguments: [String], log: String, port: UInt16, removing: String?) throws {
        // (The wrapper removes `removing` itself once etcd has exited.)
        Self.exitHandler
        let pidFile = log + ".pid"
        try? FileManager.default.removeItem(atPath: pidFile)
        let command = arguments.map { "'\($0)'" }.joined(separator: " ")
        let script = """
            \(command) >> '\(log)' 2>&1 &
            pid=$!; echo $pid > '\(pidFile)'
            ( while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; kill -9 $pid 2>/dev/null ) &
            watchdog=$!
            wait $pid
            kill $watchdog 2>/dev/null
            \(removing.map { "rm -rf '\($0)'" } ?? "true")
            """
        // Spawned with a clean signal mask: the calling thread may block SIGCHLD, and a
        // shell that inherits that never sees etcd exit (`wait` would sleep forever).
        var wrapper: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = ["/bin/sh", "-c", script].map { $0.withCString { strdup($0) } } + [nil]
        defer { for argument in argv { free(argument) } }
        let spawned = cplatform_spawn_detached(&wrapper, "/bin/sh", argv)
        guard spawned == 0 else { throw EtcdProcess.StartError("the etcd wrapper could not be started: errno \(spawned)") }
        self.wrapper = wrapper
        var pid: Int32 = 0
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if pid == 0, let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
               let value = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                pid = value
            }
            if pid != 0, Self.accepts(port: port) || !isRunning { break }
            usleep(50_000)
        }
        guard pid != 0, isRunning, Self.accepts(port: port) else {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if pid != 0 { Glibc.kill(pid, SIGKILL) }
            waitForExit()
            throw EtcdProcess.StartError("etcd did not start within 20 s: \(output.suffix(2_000))")
        }
        etcd.store(pid, ordering: .relaxed)
        Self.live.withLock { $0[ObjectIdentifier(self)] = self }
    }

    /// Whether the wrapper (and so etcd) still runs; reaps it once it has exited.
    var isRunning: Bool {
        exited.withLock { exited in
            guard !exited else { return false }
            var status: Int32 = 0
            let result = waitpid(wrapper, &status, WNOHANG)
            // ECHILD: reaped already (by whoever waits for every child).
            if result == wrapper || result == -1 && errno == ECHILD { exited = true }
            return !exited
        }
    }

    /// Kills etcd (SIGKILL) and waits, up to 10 seconds, until it has exited and its
    /// wrapper has reaped it (and removed what it removes).
    func kill() {
        // Only while the wrapper runs: once it has reaped etcd, the pid may be another's.
        if isRunning { Glibc.kill(pid, SIGKILL) }
        waitForExit()
    }

    /// Stops etcd as an operator would (SIGTERM: it finishes what it is applying and
    /// leaves), and waits until it has exited; killed after 10 seconds.
    func stop() {
        if isRunning { Glibc.kill(pid, SIGTERM) }
        waitForExit()
        if isRunning { kill() }
    }

    /// Waits, up to 10 seconds, for the wrapper to end (it ends when etcd has).
    func waitForExit() {
        let deadline = Date().addingTimeInterval(10)
        while isRunning, Date() < deadline { usleep(5_000) }
        _ = Self.live.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
    }

    /// Freezes or thaws the process, as a hung machine would.
    func pause() { if isRunning { Glibc.kill(pid, SIGSTOP) } }
    func resume() { if isRunning { Glibc.kill(pid, SIGCONT) } }

    /// Kills every member still running and waits for each (at exit).
    static func stopAll() {
        let members = live.withLock { Array($0.values) }
        for member in members where member.isRunning { Glibc.kill(member.pid, SIGKILL) }
        for member in members { member.waitForExit() }
        for directory in directories.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// Removes `directory` at exit (after the members), unless `keep` is called first.
    static func removeAtExit(_ directory: String) {
        Self.exitHandler
        _ = directories.withLock { $0.insert(directory) }
    }

    static func keep(_ directory: String) {
        _ = directories.withLock { $0.remove(directory) }
    }

    static func freePort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(socket, address, length) == 0 && getsockname(socket, address, &length) == 0
            }
        }
        guard bound else { throw EtcdProcess.StartError("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    static func accepts(port: UInt16) -> Bool {
        guard let socket = try? TCPRelay.connect(port: port) else { return false }
        close(socket)
        return true
    }

    /// The etcd executable.
    static func executable() throws -> String {
        guard let etcd = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw EtcdProcess.StartError("etcd is not installed: run scripts/bootstrap (Debian's etcd-server)")
        }
        return etcd
    }
}
