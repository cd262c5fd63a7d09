import ArgumentParser
import Foundation
import StoreOps

struct RecoverCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Finish what an interrupted storectl run left at a store, backup or restored copy.",
        discussion: reflow("""
            A restore in place (and a migration's rollback, and a backup's final renames) replaces several files as
            one journaled transaction (<path>.storectl-swap.json). If storectl was killed in the middle, this finishes
            it, or undoes it when a staged file has gone, so the path is exactly in one state again; then removes
            temporary files of dead storectl processes beside it. A backup or restore killed before it recorded its swap
            leaves only temporary files named for its target: recover removes them when their process is gone (75 while
            it runs), and is 66 only when there is no file, no record and no such leftover. Every storectl command that touches the store does
            the same first; run this after a crash before starting the app. An interrupted migration is reported, not
            decided: `storectl rollback` or `storectl migrate --resume`.
            """))

    @Argument(help: "The store (or backup, or restored file) to recover.") var path: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let result = try Recovery.run(path: path)
        if json { print(jsonReport(result)); return }
        if let swap = result.swap {
            let what = swap.direction == "forward" ? "finished the interrupted \(swap.operation)" : "undid the interrupted \(swap.operation) (a staged file was gone)"
            var line = "\(what) of \(swap.target)"
            if !swap.kept.isEmpty { line += "; the previous files are kept at \(swap.kept.joined(separator: ", "))" }
            if !swap.intruders.isEmpty { line += "; files found in the way were kept: \(swap.intruders.joined(separator: ", "))" }
            print(line)
            if let written = swap.writtenSince {
                print("warning: another process wrote to \(written.joined(separator: ", ")) after the \(swap.operation) was interrupted: what it wrote is not in the store; it is in the previous files kept above")
            }
            if swap.verified == false {
                print("warning: \(swap.target) is not the database the \(swap.operation) staged (written to since it was put in place, or damaged): look at it before the app trusts it (`storectl preflight \(swap.target)`)")
            }
        } else if result.inFolder == nil, result.removedTemporaryFiles.isEmpty, result.running == nil {
            print("nothing to recover at \(result.path)")
        }
        if !result.removedTemporaryFiles.isEmpty {
            print("removed \(result.removedTemporaryFiles.count) temporary file\(result.removedTemporaryFiles.count == 1 ? "" : "s") of dead storectl runs")
        }
        if let running = result.running {
            let pids = Array(Set(running.map(\.pid))).sorted().map(String.init).joined(separator: ", ")
            print("left alone: \(Format.plural(running.count, "temporary file", "temporary files")) of storectl runs still going (pid \(pids)); a run killed later leaves them to the next recover")
        }
        if let journal = result.interruptedMigration { print("note: \(journal.advice)") }
        for inner in result.inFolder ?? [] {
            if let swap = inner.swap {
                print("\(swap.direction == "forward" ? "finished" : "undid") the interrupted \(swap.operation) of \(swap.target)"
                      + (swap.writtenSince == nil ? "" : "; another process wrote to it after the crash: the previous files are kept at \(swap.kept.joined(separator: ", "))"))
            }
            if let journal = inner.interruptedMigration { print("note: \(journal.advice)") }
        }
    }
}
