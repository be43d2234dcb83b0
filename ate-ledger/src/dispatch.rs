//! [`Dispatch`], the call's one way to mark its try dispatched (feature
//! `tokio`): the mark is asked for once, and once failed it stays failed,
//! so nothing is ever sent on a try whose mark did not land.

use tokio::sync::oneshot;

use crate::error::Error;
use crate::model::Fence;

/// How a [`Dispatch`] asks the running `execute` for the mark: it sends
/// where to answer, and gets the mark's result there.
pub(crate) type MarkRequest = oneshot::Sender<oneshot::Sender<Result<(), Error>>>;

/// Handed to the call [`AsyncLedger::execute`](crate::AsyncLedger::execute) runs: [`send`](Self::send)
/// marks the try dispatched, durably, right before the request goes to
/// the provider. Until then a failure is the caller's (pre-provider,
/// revivable); from then on a missing answer is ambiguous and the key is
/// never executed again.
///
/// A try is marked once: after a `send` that succeeded, `send` answers the
/// same [`Fence`] again; after one that failed, it answers the same error
/// again (nothing may be sent on this try, ever: return
/// [`Call::PreProvider`](crate::Call::PreProvider)).
#[derive(Debug)]
pub struct Dispatch {
    state: Sending,
    fence: Fence,
}

/// Where a [`Dispatch`] stands.
#[derive(Debug)]
enum Sending {
    /// Not asked yet: the way to ask `drive` for the mark.
    Ready(MarkRequest),
    /// The mark landed.
    Sent,
    /// The mark failed (or the ask was lost): it stays failed.
    Failed(Error),
}

impl Dispatch {
    /// A dispatch whose [`send`](Self::send) asks `drive` for the mark
    /// through `request`.
    pub(crate) fn new(request: MarkRequest, fence: Fence) -> Self {
        Self {
            state: Sending::Ready(request),
            fence,
        }
    }

    /// Marks the try dispatched and answers the lease's fencing token
    /// ([`Fence`]), to send with the request to a provider that can refuse
    /// a stale worker. Call it right before sending; send only if it
    /// succeeds.
    ///
    /// # Errors
    ///
    /// The ledger's: [`Error::StaleLease`] (another worker took the
    /// attempt over), a storage error. Then nothing may be sent, and
    /// every later `send` answers the same error.
    pub async fn send(&mut self) -> Result<Fence, Error> {
        let request = match std::mem::replace(&mut self.state, Sending::Sent) {
            Sending::Ready(request) => request,
            Sending::Sent => return Ok(self.fence),
            Sending::Failed(e) => {
                self.state = Sending::Failed(e.clone());
                return Err(e);
            }
        };
        // Failed until the mark is known to have landed: a send whose
        // future is dropped half way stays failed too.
        let gone = || Error::Storage("the execute call ended".into());
        self.state = Sending::Failed(gone());
        let (answer, reply) = oneshot::channel();
        request.send(answer).map_err(|_| gone())?;
        let marked = reply.await.unwrap_or_else(|_| Err(gone()));
        self.state = match &marked {
            Ok(()) => Sending::Sent,
            Err(e) => Sending::Failed(e.clone()),
        };
        marked.map(|()| self.fence)
    }

    /// Whether a [`send`](Self::send) has succeeded: the dispatch mark
    /// landed.
    pub fn is_sent(&self) -> bool {
        matches!(self.state, Sending::Sent)
    }

    /// The lease's fencing token ([`Fence`]), known before the mark (to
    /// build the request with it); send it only after [`send`](Self::send)
    /// succeeded.
    pub fn fence(&self) -> Fence {
        self.fence
    }
}
