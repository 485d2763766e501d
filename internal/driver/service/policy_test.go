package service

import (
	"syscall"
	"testing"
	"time"
)

func TestExitStatusResult(t *testing.T) {
	tests := []struct {
		st          ExitStatus
		daemon, cmd string // result for a main process, for a command
		wantString  string
	}{
		{ExitStatus{}, "success", "success", "code=exited, status=0/SUCCESS"},
		{ExitStatus{Code: 1}, "exit-code", "exit-code", "code=exited, status=1/FAILURE"},
		{ExitStatus{Code: 42}, "exit-code", "exit-code", "code=exited, status=42/n/a"},
		{ExitStatus{Signal: syscall.SIGTERM}, "success", "signal", "code=killed, status=15/TERM"},
		{ExitStatus{Signal: syscall.SIGHUP}, "success", "signal", "code=killed, status=1/HUP"},
		{ExitStatus{Signal: syscall.SIGINT}, "success", "signal", "code=killed, status=2/INT"},
		{ExitStatus{Signal: syscall.SIGPIPE}, "success", "success", "code=killed, status=13/PIPE"},
		{ExitStatus{Signal: syscall.SIGKILL}, "signal", "signal", "code=killed, status=9/KILL"},
		{ExitStatus{Signal: syscall.SIGSEGV, Dumped: true}, "core-dump", "core-dump", "code=dumped, status=11/SEGV"},
		{ExitStatus{Signal: syscall.Signal(40)}, "signal", "signal", "code=killed, status=40/40"},
	}
	for _, tt := range tests {
		if got := tt.st.Result(true); got != tt.daemon {
			t.Errorf("%+v.Result(daemon) = %q, want %q", tt.st, got, tt.daemon)
		}
		if got := tt.st.Result(false); got != tt.cmd {
			t.Errorf("%+v.Result(command) = %q, want %q", tt.st, got, tt.cmd)
		}
		if got := tt.st.String(); got != tt.wantString {
			t.Errorf("%+v.String() = %q, want %q", tt.st, got, tt.wantString)
		}
	}
}

func TestExitStatusOf(t *testing.T) {
	// Wait statuses as the kernel encodes them.
	if got, want := ExitStatusOf(syscall.WaitStatus(3<<8)), (ExitStatus{Code: 3}); got != want {
		t.Errorf("ExitStatusOf(exit 3) = %+v, want %+v", got, want)
	}
	if got, want := ExitStatusOf(syscall.WaitStatus(9)), (ExitStatus{Signal: syscall.SIGKILL}); got != want {
		t.Errorf("ExitStatusOf(SIGKILL) = %+v, want %+v", got, want)
	}
	if got, want := ExitStatusOf(syscall.WaitStatus(11|0x80)), (ExitStatus{Signal: syscall.SIGSEGV, Dumped: true}); got != want {
		t.Errorf("ExitStatusOf(SIGSEGV, core) = %+v, want %+v", got, want)
	}
}

func TestShouldRestart(t *testing.T) {
	// The table of systemd.service(5), Restart=, with "timeout" for the
	// timeout column and "watchdog" for the watchdog one. oom-kill restarts
	// as in systemd's service_shall_restart: not under on-abort; protocol
	// (a notify unit that exited before READY=1) is an unclean exit.
	results := []string{ResultSuccess, ResultExitCode, ResultSignal, ResultCoreDump, ResultTimeout, ResultOOMKill, ResultStartLimitHit, ResultWatchdog, ResultProtocol}
	want := map[string][]bool{
		//             success exit   signal core   timeout oom   limit  watchdog protocol
		"":            {false, false, false, false, false, false, false, false, false},
		"no":          {false, false, false, false, false, false, false, false, false},
		"always":      {true, true, true, true, true, true, false, true, true},
		"on-success":  {true, false, false, false, false, false, false, false, false},
		"on-failure":  {false, true, true, true, true, true, false, true, true},
		"on-abnormal": {false, false, true, true, true, true, false, true, false},
		"on-abort":    {false, false, true, true, false, false, false, false, false},
		"on-watchdog": {false, false, false, false, false, false, false, true, false},
	}
	for policy, row := range want {
		for i, result := range results {
			if got := ShouldRestart(policy, result); got != row[i] {
				t.Errorf("ShouldRestart(%q, %q) = %v, want %v", policy, result, got, row[i])
			}
		}
	}
}

func TestStartLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name     string
		burst    int
		interval time.Duration
		at       []time.Duration // offsets from t0 of successive starts
		want     []bool
	}{
		{"within burst", 3, 10 * time.Second, []time.Duration{0, 1, 2}, []bool{true, true, true}},
		{"over burst", 3, 10 * time.Second, []time.Duration{0, 1, 2, 3, 4}, []bool{true, true, true, false, false}},
		{"window ends", 2, 10 * time.Second, []time.Duration{0, 1, 2, 11 * time.Second, 12 * time.Second, 13 * time.Second}, []bool{true, true, false, true, true, false}},
		{"disabled by burst", 0, 10 * time.Second, []time.Duration{0, 0, 0}, []bool{true, true, true}},
		{"disabled by interval", 1, 0, []time.Duration{0, 0, 0}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		var l StartLimiter
		for i, off := range tt.at {
			if got := l.Allow(t0.Add(off), tt.burst, tt.interval); got != tt.want[i] {
				t.Errorf("%s: start %d at +%v: allow = %v, want %v", tt.name, i+1, off, got, tt.want[i])
			}
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Signal
		err  bool
	}{
		{"", syscall.SIGTERM, false},
		{"SIGTERM", syscall.SIGTERM, false},
		{"INT", syscall.SIGINT, false},
		{"sigkill", syscall.SIGKILL, false},
		{"10", syscall.SIGUSR1, false},
		{"SIGFOO", 0, true},
		{"0", 0, true},
		{"65", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
