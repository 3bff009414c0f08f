// `strata shell [PATH]`: the interactive prompt (the default subcommand).
import ArgumentParser
import Strata
import Foundation

struct ShellCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "An interactive prompt over a store (created if missing); reads a script from stdin when it is not a terminal.")

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        let interactive = isTerminal(STDIN_FILENO)
        let store = try reportingErrors { try Store.open(path: path) }
        let shell = Shell(store: store, interactive: interactive)
        if interactive {
            print("Strata shell on \(path) (version \(store.version)). Type help for commands, quit to leave.")
        }
        while !shell.finished {
            if interactive {
                print(shell.prompt, terminator: "")
                fflush(nil)  // all output streams: the prompt has no newline
            }
            guard let line = readLine() else { break }
            shell.execute(line)
            // Each answer goes out at once, so a program driving the shell through pipes
            // can wait for it.
            fflush(nil)
        }
        shell.finish()
        try reportingErrors { try store.close() }
        if shell.failed && !interactive { throw ExitCode.failure }
    }
}
