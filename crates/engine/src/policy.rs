//! `--placement`: where each part of IN (search, insert, delete), KC and RD run when a
//! device holds the index. `auto` lets the cost model choose per batch (cost.rs); a forced placement
//! is for experiments and for `hkv-bench placement`, which enumerates them all.

use std::fmt;
use std::str::FromStr;

/// A processor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Proc {
    #[default]
    Cpu,
    Device,
}

impl Proc {
    pub fn name(self) -> &'static str {
        match self {
            Proc::Cpu => "cpu",
            Proc::Device => "device",
        }
    }

    pub(crate) fn other(self) -> Proc {
        match self {
            Proc::Cpu => Proc::Device,
            Proc::Device => Proc::Cpu,
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// The tasks that can be placed apart: IN split as DIDO splits it (search, insert,
/// delete), and the reads' KC and RD (device kernels only where it shares host memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Task {
    Search,
    Insert,
    Delete,
    Kc,
    Rd,
}

/// How many tasks [`Task::ALL`] holds.
pub const TASKS: usize = 5;

impl Task {
    pub const ALL: [Task; TASKS] = [Task::Search, Task::Insert, Task::Delete, Task::Kc, Task::Rd];

    pub fn name(self) -> &'static str {
        match self {
            Task::Search => "search",
            Task::Insert => "insert",
            Task::Delete => "delete",
            Task::Kc => "KC",
            Task::Rd => "RD",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// One task's placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The cost model picks per batch.
    #[default]
    Auto,
    Forced(Proc),
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Forced(p) => p.name(),
        }
    }
}

/// Each task's placement, in [`Task::ALL`] order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Placement(pub [Choice; TASKS]);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    #[error("unknown task '{0}' (search, insert, delete, IN, KC or RD)")]
    Task(String),
    #[error("unknown processor '{0}' (cpu, device or auto)")]
    Proc(String),
    #[error("'{0}' is not task=processor")]
    Form(String),
}

impl Placement {
    pub const AUTO: Placement = Placement([Choice::Auto; TASKS]);

    pub fn all(p: Proc) -> Placement {
        Placement([Choice::Forced(p); TASKS])
    }

    pub fn of(&self, t: Task) -> Choice {
        self.0[t.slot()]
    }

    /// Every forced placement: 2^5 combinations of search, insert, delete, KC and RD.
    pub fn enumerate() -> Vec<Placement> {
        (0..1u8 << TASKS)
            .map(|bits| {
                let p = |b: u8| {
                    Choice::Forced(if bits & b != 0 {
                        Proc::Device
                    } else {
                        Proc::Cpu
                    })
                };
                Placement([p(1), p(2), p(4), p(8), p(16)])
            })
            .collect()
    }
}

fn choice(s: &str) -> Result<Choice, PlacementError> {
    match s {
        "auto" => Ok(Choice::Auto),
        "cpu" => Ok(Choice::Forced(Proc::Cpu)),
        "device" | "gpu" => Ok(Choice::Forced(Proc::Device)),
        other => Err(PlacementError::Proc(other.into())),
    }
}

impl FromStr for Placement {
    type Err = PlacementError;

    /// `auto`, `cpu`, `device`, or a comma list of `task=processor` where a task is
    /// `search`, `insert`, `delete`, `IN` (those three), `KC` or `RD`; tasks not named stay
    /// `auto`.
    fn from_str(s: &str) -> Result<Placement, PlacementError> {
        let s = s.trim();
        if !s.contains('=') {
            return Ok(Placement([choice(s)?; TASKS]));
        }
        let mut out = Placement::AUTO;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (task, proc) = part
                .split_once('=')
                .ok_or_else(|| PlacementError::Form(part.into()))?;
            let c = choice(proc.trim())?;
            match task.trim() {
                "IN" | "in" => out.0[..3].fill(c),
                "search" => out.0[0] = c,
                "insert" => out.0[1] = c,
                "delete" => out.0[2] = c,
                "KC" | "kc" => out.0[3] = c,
                "RD" | "rd" => out.0[4] = c,
                other => return Err(PlacementError::Task(other.into())),
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.iter().all(|&c| c == self.0[0]) {
            return f.write_str(self.0[0].name());
        }
        let parts: Vec<String> = Task::ALL
            .iter()
            .map(|&t| format!("{}={}", t.name(), self.of(t).name()))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_placements_and_per_task_lists_parse() {
        assert_eq!("auto".parse(), Ok(Placement::AUTO));
        assert_eq!("cpu".parse(), Ok(Placement::all(Proc::Cpu)));
        assert_eq!("device".parse(), Ok(Placement::all(Proc::Device)));
        let p: Placement = "IN=device".parse().unwrap();
        assert_eq!(
            p.to_string(),
            "search=device,insert=device,delete=device,KC=auto,RD=auto"
        );
        assert_eq!(
            "IN=device,KC=device,rd=device".parse(),
            Ok(Placement::all(Proc::Device))
        );
        let p: Placement = "search=device,insert=cpu".parse().unwrap();
        assert_eq!(p.of(Task::Search), Choice::Forced(Proc::Device));
        assert_eq!(p.of(Task::Insert), Choice::Forced(Proc::Cpu));
        assert_eq!(p.of(Task::Delete), Choice::Auto);
        assert_eq!(
            p.to_string(),
            "search=device,insert=cpu,delete=auto,KC=auto,RD=auto"
        );
        assert_eq!(p.to_string().parse(), Ok(p));
    }

    #[test]
    fn bad_placements_name_what_is_wrong() {
        assert_eq!(
            "fpga".parse::<Placement>(),
            Err(PlacementError::Proc("fpga".into()))
        );
        assert_eq!(
            "WR=device".parse::<Placement>(),
            Err(PlacementError::Task("WR".into()))
        );
        assert_eq!(
            "search=cpu,insert".parse::<Placement>(),
            Err(PlacementError::Form("insert".into()))
        );
    }

    #[test]
    fn enumeration_covers_every_forced_combination_once() {
        let all = Placement::enumerate();
        assert_eq!(all.len(), 32);
        let set: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(set.len(), 32);
        assert!(all.contains(&Placement::all(Proc::Cpu)));
        assert!(all.contains(&Placement::all(Proc::Device)));
    }
}
