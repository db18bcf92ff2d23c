// The simulated SoC's main (sim/soc_sim.py builds it with Verilator around mlo_hw.soc.write_sim's mlo_soc.v):
// clocks the SoC and moves the UART bridge's bytes (the serial_sink/serial_source byte streams of LiteX's
// RS232PHYModel, one byte a sys cycle) between the SoC and a pseudo-terminal, which litex_server --uart opens
// as it opens a board's serial port. Prints "pty <path>" on stdout once the pty is ready; on SIGTERM/SIGINT
// prints "cycles <n> seconds <s> engine_cycles <m>" (n: sys clock cycles, m: the engine clock's) and exits.
//
// Clocks: sys_clk at --sys-mhz (default 100). Compiled with MLO_ENGINE_CLK (the engine in a clock domain of its
// own: the SoC has the engine_clk pad), engine_clk at --engine-mhz too: an event loop over time in picoseconds,
// each clock's next edge at round(n * half period) (no rounding accumulates over a long run), the edges taken
// in time order, two at the same picosecond in one evaluation.
#include "Vmlo_soc.h"
#include "verilated.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <deque>
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

static volatile std::sig_atomic_t quit = 0;
static void on_signal(int) { quit = 1; }

// A clock starting low at time 0: edge n (from 1; odd edges rise) at round(n * half_ps) picoseconds.
struct Clock {
    double half_ps;
    unsigned long long edges = 0;
    explicit Clock(double mhz) : half_ps(5e5 / mhz) {}
    unsigned long long next_ps() const { return (unsigned long long)std::llround((edges + 1) * half_ps); }
    bool next_rises() const { return (edges & 1) == 0; }
    unsigned char step() { return (unsigned char)(++edges & 1); }   // take the next edge: the new level
};

// The value after `flag` in argv (a frequency in MHz), or `dflt`.
static double arg_mhz(int argc, char** argv, const char* flag, double dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (std::strcmp(argv[i], flag) == 0) return std::atof(argv[i + 1]);
    return dflt;
}

int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    Clock sys(arg_mhz(argc, argv, "--sys-mhz", 100.0));
#ifdef MLO_ENGINE_CLK
    Clock engine(arg_mhz(argc, argv, "--engine-mhz", 100.0));
#endif
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) { perror("pty"); return 2; }
    const char* name = ptsname(master);
    // keep the slave open ourselves: the master then never reads EIO while no client has it open
    int slave = open(name, O_RDWR | O_NOCTTY);
    if (slave < 0) { perror("pty slave"); return 2; }
    struct termios t;
    tcgetattr(slave, &t);
    cfmakeraw(&t);
    tcsetattr(slave, TCSANOW, &t);
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::printf("pty %s\n", name);
    std::fflush(stdout);

    Vmlo_soc* top = new Vmlo_soc;
    top->sys_clk = 0;
#ifdef MLO_ENGINE_CLK
    top->engine_clk = 0;
#endif
    top->sys_rst = 1;
    top->serial_sink_valid = 0;
    top->serial_source_ready = 1;
    top->sim_trace = 0;
    std::deque<unsigned char> rx, tx;   // rx: host -> SoC, tx: SoC -> host
    unsigned char buf[4096];
    unsigned long long cycles = 0;
    auto t0 = std::chrono::steady_clock::now();
    top->eval();
    while (!quit) {
        unsigned long long now = sys.next_ps();      // the next sys edge, in ps
#ifdef MLO_ENGINE_CLK
        unsigned long long t_engine = engine.next_ps();
        if (t_engine < now) {                     // an engine edge before sys's next
            top->engine_clk = engine.step();
            top->eval();
            continue;
        }
        bool engine_too = t_engine == now;       // both edges at the same picosecond
#endif
        if (!sys.next_rises()) {                  // sys falls
            top->sys_clk = sys.step();
#ifdef MLO_ENGINE_CLK
            if (engine_too) top->engine_clk = engine.step();
#endif
            top->eval();
            continue;
        }
        // sys rises: the reset and the bridge's byte streams first, as inputs sampled by this edge
        if (cycles == 16) top->sys_rst = 0;
        // the pty, every 64 cycles, or at once when the SoC has nothing to take
        if ((cycles & 63) == 0 || (rx.empty() && !tx.empty())) {
            if (!tx.empty()) {
                size_t n = 0;
                for (auto it = tx.begin(); it != tx.end() && n < sizeof buf; ++it) buf[n++] = *it;
                ssize_t w = write(master, buf, n);
                if (w > 0) tx.erase(tx.begin(), tx.begin() + w);
            }
            if (rx.size() < 65536) {
                ssize_t r = read(master, buf, sizeof buf);
                for (ssize_t i = 0; i < r; i++) rx.push_back(buf[i]);
            }
        }
        top->serial_sink_valid = !rx.empty();
        top->serial_sink_data = rx.empty() ? 0 : rx.front();
        top->eval();
        bool took = top->serial_sink_valid && top->serial_sink_ready;
        bool gave = top->serial_source_valid && top->serial_source_ready;
        unsigned char out = top->serial_source_data;
        top->sys_clk = sys.step();
#ifdef MLO_ENGINE_CLK
        if (engine_too) top->engine_clk = engine.step();
#endif
        top->eval();
        if (took) rx.pop_front();
        if (gave) tx.push_back(out);
        cycles++;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef MLO_ENGINE_CLK
    unsigned long long engine_cycles = (engine.edges + 1) / 2;     // its rising edges
#else
    unsigned long long engine_cycles = cycles;
#endif
    std::printf("cycles %llu seconds %.3f engine_cycles %llu\n", cycles, s, engine_cycles);
    std::fflush(stdout);
    top->final();
    delete top;
    close(slave);
    close(master);
    return 0;
}
