package unit

import "slices"

// The option tables of the unit types other than services, from systemd's
// man pages (systemd.socket(5), systemd.timer(5), systemd.path(5),
// systemd.mount(5), systemd.automount(5), systemd.swap(5)), sorted. Socket,
// mount and swap units also take the options of systemd.exec(5),
// systemd.kill(5) and systemd.resource-control(5): execOptions, the service
// options less those only services have.

// serviceOnlyOptions are the options of serviceOptions that systemd.service(5)
// defines for services alone.
var serviceOnlyOptions = []string{
	"BusName", "ExecCondition", "ExecReload", "ExecStart", "ExecStartPost", "ExecStartPre",
	"ExecStop", "ExecStopPost", "ExitType", "FailureAction", "FileDescriptorStoreMax",
	"FileDescriptorStorePreserve", "GuessMainPID", "NonBlocking", "NotifyAccess", "OOMPolicy",
	"OpenFile", "PIDFile", "PermissionsStartOnly", "RebootArgument", "ReloadSignal",
	"RemainAfterExit", "Restart", "RestartForceExitStatus", "RestartMaxDelaySec", "RestartMode",
	"RestartPreventExitStatus", "RestartSec", "RestartSteps", "RootDirectoryStartOnly",
	"RuntimeMaxSec", "RuntimeRandomizedExtraSec", "Sockets", "StartLimitAction",
	"StartLimitBurst", "StartLimitInterval", "SuccessExitStatus", "TimeoutAbortSec",
	"TimeoutSec", "TimeoutStartFailureMode", "TimeoutStartSec", "TimeoutStopFailureMode",
	"TimeoutStopSec", "Type", "USBFunctionDescriptors", "USBFunctionStrings", "WatchdogSec",
}

// withExec returns own merged with execOptions, sorted.
func withExec(own ...string) []string {
	var all []string
	for _, o := range serviceOptions {
		if !slices.Contains(serviceOnlyOptions, o) {
			all = append(all, o)
		}
	}
	all = append(all, own...)
	slices.Sort(all)
	return slices.Compact(all)
}

var socketOptions = withExec(
	"Accept", "BackLog", "BindIPv6Only", "BindToDevice", "Broadcast", "DeferAcceptSec",
	"DeferTrigger", "DeferTriggerMaxSec", "DirectoryMode", "ExecStartPost", "ExecStartPre",
	"ExecStopPost", "ExecStopPre", "FileDescriptorName", "FlushPending", "FreeBind", "IPTOS",
	"IPTTL", "KeepAlive", "KeepAliveIntervalSec", "KeepAliveProbes", "KeepAliveTimeSec",
	"ListenDatagram", "ListenFIFO", "ListenMessageQueue", "ListenNetlink",
	"ListenSequentialPacket", "ListenSpecial", "ListenStream", "ListenUSBFunction", "Mark",
	"MaxConnections", "MaxConnectionsPerSource", "MessageQueueMaxMessages",
	"MessageQueueMessageSize", "NoDelay", "PassCredentials", "PassFileDescriptorsToExec",
	"PassPIDFD", "PassPacketInfo", "PassSecurity", "PipeSize", "PollLimitBurst",
	"PollLimitIntervalSec", "Priority", "ReceiveBuffer", "RemoveOnStop", "ReusePort",
	"SELinuxContextFromNet", "SendBuffer", "Service", "SmackLabel", "SmackLabelIPIn",
	"SmackLabelIPOut", "SocketGroup", "SocketMode", "SocketProtocol", "SocketUser", "Symlinks",
	"TimeoutSec", "Timestamping", "Transparent", "TriggerLimitBurst", "TriggerLimitIntervalSec",
	"Writable",
)

var timerOptions = []string{
	"AccuracySec", "DeferReactivation", "FixedRandomDelay", "OnActiveSec", "OnBootSec",
	"OnCalendar", "OnClockChange", "OnStartupSec", "OnTimezoneChange", "OnUnitActiveSec",
	"OnUnitInactiveSec", "Persistent", "RandomizedDelaySec", "RandomizedOffsetSec",
	"RemainAfterElapse", "Unit", "WakeSystem",
}

var pathOptions = []string{
	"DirectoryMode", "DirectoryNotEmpty", "MakeDirectory", "PathChanged", "PathExists",
	"PathExistsGlob", "PathModified", "TriggerLimitBurst", "TriggerLimitIntervalSec", "Unit",
}

var mountOptions = withExec(
	"DirectoryMode", "ForceUnmount", "LazyUnmount", "Options", "ReadWriteOnly",
	"SloppyOptions", "TimeoutSec", "Type", "What", "Where",
)

var automountOptions = []string{"DirectoryMode", "ExtraOptions", "TimeoutIdleSec", "Where"}

var swapOptions = withExec("Options", "Priority", "TimeoutSec", "What")

// containerOptions are the options of [X-Container], Flotilla's section for
// units the docker driver runs (see Container).
var containerOptions = []string{"Command", "Image", "Network", "Ports", "Volumes"}
